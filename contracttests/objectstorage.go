package contracttests

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/abi-engine/engine/ports"
)

// ObjectStorageCapabilities are what an adapter offers beyond the core.
type ObjectStorageCapabilities struct {
	// ConditionalPut: IfAbsent and IfMatch Puts are checked and applied
	// atomically, across handles, so of many racers exactly one wins. Some
	// S3-compatible services ignore the conditional headers.
	ConditionalPut bool
	// PathLikeKeys: keys with ".", ".." or empty segments ("../x", "a//b",
	// "/x", "x/") are plain names like any other. Without it the adapter
	// must refuse them with ErrInvalidArgument: an S3 server that keeps
	// objects as files would store "d/../y" over "y".
	PathLikeKeys bool
	// NestedKeys: a key and the same key followed by "/..." coexist ("a"
	// and "a/b"). S3 servers that keep objects as files cannot do this.
	NestedKeys bool
	// Linearizable: every call on an object takes effect at one moment
	// within it. A Get returns the content and the ETag of one version, a
	// conditional Put compares against the version a Get would return, and
	// of two Deletes racing on one object exactly one succeeds. An S3
	// adapter offers what its server does: versitygw reads an object's ETag
	// and its content in separate steps, and answers a conditional delete
	// of a key already gone with success.
	Linearizable bool
}

const (
	// objRacers is how many Puts race for one key.
	objRacers = 16
	// objRaceRounds is how many times the Put races run.
	objRaceRounds = 5
	// objLargeSize is the object streamed through Put and Get.
	objLargeSize = 64 << 20
	// objHeapSlack is how far the live heap may grow while it streams.
	objHeapSlack = 32 << 20
	// objHeapSampleEvery is how many streamed bytes pass between heap samples.
	objHeapSampleEvery = 4 << 20
	// objLargeTimeout bounds each call on the large object, which a slow
	// machine under the race detector takes seconds to move.
	objLargeTimeout = 2 * time.Minute
)

// RunObjectStorage holds an object storage adapter to the contract of
// ports.ObjectStorage.
func RunObjectStorage(t *testing.T, h Harness[ports.ObjectStorage], caps ObjectStorageCapabilities) {
	cases := []struct {
		name string
		run  func(t *testing.T, open func(t *testing.T) ports.ObjectStorage, caps ObjectStorageCapabilities)
	}{
		{"EmptyStore", objEmptyStore},
		{"PutThenGet", objPutThenGet},
		{"PutOverwrites", objPutOverwrites},
		{"EmptyObject", objEmptyObject},
		{"ContentTypeRoundTrip", objContentTypeRoundTrip},
		{"ContentTypeIsBounded", objContentTypeIsBounded},
		{"MissingObjectIsNotFound", objMissingObjectIsNotFound},
		{"DeleteRemovesTheObject", objDeleteRemovesTheObject},
		{"TwoHandlesShareTheStore", objTwoHandlesShareTheStore},
		{"InvalidKeysAreRejected", objInvalidKeysAreRejected},
		{"OddKeysAreNames", objOddKeysAreNames},
		{"AKeyWithAControlCharacterIsListedAsStoredOrRefused", objAKeyWithAControlCharacterIsListedAsStoredOrRefused},
		{"PathLikeKeysStayInside", objPathLikeKeysStayInside},
		{"NestedKeys", objNestedKeys},
		{"FailedPutKeepsThePreviousObject", objFailedPutKeepsThePreviousObject},
		{"APutWhoseCallerGivesUpAtItsEndStoresNothing", objAPutWhoseCallerGivesUpAtItsEndStoresNothing},
		{"RangeReads", objRangeReads},
		{"ListPagination", objListPagination},
		{"ListAfterACursorNoLongerStored", objListAfterACursorNoLongerStored},
		{"ListDescribesObjects", objListDescribesObjects},
		{"ListLimitIsBounded", objListLimitIsBounded},
		{"ListRefusesInvalidPrefixesAndCursors", objListRefusesInvalidPrefixesAndCursors},
		{"LargeObjectStreamsInBoundedMemory", objLargeObjectStreamsInBoundedMemory},
		{"PutIfAbsent", objPutIfAbsent},
		{"PutIfMatch", objPutIfMatch},
		{"ConditionalPutOfALargeObject", objConditionalPutOfALargeObject},
		{"PutIfAbsentRace", objPutIfAbsentRace},
		{"PutIfMatchRace", objPutIfMatchRace},
		{"DeleteIfMatch", objDeleteIfMatch},
		{"DeleteIfMatchNeverRemovesAPutAfterIt", objDeleteIfMatchNeverRemovesAPutAfterIt},
		{"WritesAreLinearizable", objWritesAreLinearizable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The large object's case reads the process's whole heap, so
			// it runs alone: Go holds the parallel cases until the
			// serial ones are done.
			if c.name != objAloneCase {
				t.Parallel()
			}
			c.run(t, newStore(t, h), caps)
		})
	}
}

// objAloneCase measures the live heap of the whole process, which another
// case's objects would swell.
const objAloneCase = "LargeObjectStreamsInBoundedMemory"

func objNeedConditional(t *testing.T, caps ObjectStorageCapabilities) {
	t.Helper()
	if !caps.ConditionalPut {
		t.Skipf("%s: no ConditionalPut", objAdapterName(t))
	}
}

// objAdapterName is the adapter's part of a subtest name:
// TestXxxContract/<adapter>/<Case>.
func objAdapterName(t *testing.T) string {
	parts := strings.Split(t.Name(), "/")
	if len(parts) < 2 {
		return t.Name()
	}
	return parts[len(parts)-2]
}

func objPut(t *testing.T, s ports.ObjectStorage, key, content string, opts ports.PutObjectOptions) ports.ObjectInfo {
	t.Helper()
	info, err := s.Put(ctx(t), key, strings.NewReader(content), opts)
	if err != nil {
		t.Fatalf("Put %q: %v", key, err)
	}
	if info.Key != key || info.Size != int64(len(content)) || info.ETag == "" {
		t.Fatalf("Put %q of %d bytes returned %+v, want the key, the size and an ETag", key, len(content), info)
	}
	return info
}

// ObjectContent is what key holds in s, read whole; the test fails when
// it cannot be read. Adapter tests beside the suite use it too.
func ObjectContent(t *testing.T, s ports.ObjectStorage, key string) string {
	t.Helper()
	content, _ := objGet(t, s, key, ports.GetObjectOptions{})
	return content
}

func objGet(t *testing.T, s ports.ObjectStorage, key string, opts ports.GetObjectOptions) (string, ports.ObjectInfo) {
	t.Helper()
	r, info, err := s.Get(ctx(t), key, opts)
	if err != nil {
		t.Fatalf("Get %q %+v: %v", key, opts, err)
	}
	if r == nil {
		t.Fatalf("Get %q %+v returned no reader and no error", key, opts)
	}
	t.Cleanup(func() { r.Close() })
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("Get %q: read: %v", key, err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Get %q: close: %v", key, err)
	}
	return string(b), info
}

func objStat(t *testing.T, s ports.ObjectStorage, key string) ports.ObjectInfo {
	t.Helper()
	info, err := s.Stat(ctx(t), key)
	if err != nil {
		t.Fatalf("Stat %q: %v", key, err)
	}
	return info
}

// objListAll pages through List and returns every object with the prefix.
func objListAll(t *testing.T, s ports.ObjectStorage, prefix string, limit int) []ports.ObjectInfo {
	t.Helper()
	var all []ports.ObjectInfo
	cursor := ""
	for page := 0; ; page++ {
		if page > 10_000 {
			t.Fatalf("List %q never returned an empty cursor", prefix)
		}
		infos, next, err := s.List(ctx(t), prefix, limit, cursor)
		if err != nil {
			t.Fatalf("List %q after %q: %v", prefix, cursor, err)
		}
		if limit > 0 && len(infos) > limit {
			t.Fatalf("List %q with limit %d returned %d objects", prefix, limit, len(infos))
		}
		all = append(all, infos...)
		if next == "" {
			return all
		}
		if len(infos) == 0 {
			t.Fatalf("List %q returned an empty page with cursor %q", prefix, next)
		}
		cursor = next
	}
}

func objKeys(infos []ports.ObjectInfo) []string {
	keys := make([]string, len(infos))
	for i, info := range infos {
		keys[i] = info.Key
	}
	return keys
}

// objSameInfo compares what two calls say of one object. Modified is
// compared to the second, since some services keep only seconds.
func objSameInfo(t *testing.T, what string, got, want ports.ObjectInfo) {
	t.Helper()
	if got.Key != want.Key || got.Size != want.Size || got.ETag != want.ETag {
		t.Fatalf("%s: %+v, want key %q, size %d, ETag %q", what, got, want.Key, want.Size, want.ETag)
	}
	if d := got.Modified.Sub(want.Modified); d > time.Second || d < -time.Second {
		t.Fatalf("%s: modified %v, want %v", what, got.Modified, want.Modified)
	}
}

func objEmptyStore(t *testing.T, open func(t *testing.T) ports.ObjectStorage, _ ObjectStorageCapabilities) {
	s := open(t)
	infos, next, err := s.List(ctx(t), "", 0, "")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(infos) != 0 || next != "" {
		t.Fatalf("empty store lists %v with cursor %q", objKeys(infos), next)
	}
	if _, err := s.Stat(ctx(t), "a"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Stat in an empty store: err %v, want ErrNotFound", err)
	}
}

func objPutThenGet(t *testing.T, open func(t *testing.T) ports.ObjectStorage, _ ObjectStorageCapabilities) {
	s := open(t)
	before := time.Now()
	put := objPut(t, s, "greeting", "hello, world", ports.PutObjectOptions{})
	if put.Modified.Before(before.Add(-time.Minute)) || put.Modified.After(time.Now().Add(time.Minute)) {
		t.Fatalf("Put says modified %v, want about %v", put.Modified, before)
	}
	got, info := objGet(t, s, "greeting", ports.GetObjectOptions{})
	if got != "hello, world" {
		t.Fatalf("Get gives %q, want %q", got, "hello, world")
	}
	objSameInfo(t, "Get's info", info, put)
	objSameInfo(t, "Stat", objStat(t, s, "greeting"), put)
}

func objPutOverwrites(t *testing.T, open func(t *testing.T) ports.ObjectStorage, _ ObjectStorageCapabilities) {
	s := open(t)
	first := objPut(t, s, "k", "first version", ports.PutObjectOptions{})
	second := objPut(t, s, "k", "second", ports.PutObjectOptions{})
	if second.ETag == first.ETag {
		t.Fatalf("ETag %q did not change with the content", first.ETag)
	}
	if got, _ := objGet(t, s, "k", ports.GetObjectOptions{}); got != "second" {
		t.Fatalf("Get gives %q after an overwrite, want %q", got, "second")
	}
	objSameInfo(t, "Stat after an overwrite", objStat(t, s, "k"), second)
	if keys := objKeys(objListAll(t, s, "", 0)); !slices.Equal(keys, []string{"k"}) {
		t.Fatalf("List gives %q after an overwrite, want one key", keys)
	}
}

func objEmptyObject(t *testing.T, open func(t *testing.T) ports.ObjectStorage, _ ObjectStorageCapabilities) {
	s := open(t)
	objPut(t, s, "empty", "", ports.PutObjectOptions{})
	got, info := objGet(t, s, "empty", ports.GetObjectOptions{})
	if got != "" || info.Size != 0 {
		t.Fatalf("empty object reads %q with size %d", got, info.Size)
	}
}

func objContentTypeRoundTrip(t *testing.T, open func(t *testing.T) ports.ObjectStorage, _ ObjectStorageCapabilities) {
	s := open(t)
	put := objPut(t, s, "doc.json", `{"a":1}`, ports.PutObjectOptions{ContentType: "application/json"})
	if put.ContentType != "application/json" {
		t.Fatalf("Put returned content type %q, want application/json", put.ContentType)
	}
	if _, info := objGet(t, s, "doc.json", ports.GetObjectOptions{}); info.ContentType != "application/json" {
		t.Fatalf("Get gives content type %q, want application/json", info.ContentType)
	}
	if info := objStat(t, s, "doc.json"); info.ContentType != "application/json" {
		t.Fatalf("Stat gives content type %q, want application/json", info.ContentType)
	}
	objPut(t, s, "blob", "\x00\x01", ports.PutObjectOptions{})
	if info := objStat(t, s, "blob"); info.ContentType != "application/octet-stream" {
		t.Fatalf("an object put without a content type has %q, want application/octet-stream", info.ContentType)
	}
}

// objContentTypeIsBounded: a content type of MaxContentType printable
// ASCII bytes is stored as it is; a longer one, or one holding a byte no
// HTTP header carries (a line break, a control character, anything past
// ASCII), is refused as bad input by every adapter, which then stored
// nothing. So is an if_match holding such a byte, which no ETag holds. S3
// sends both as headers: without the check, the request could not be sent
// and the Put failed as the engine's own error, where another adapter
// stored the object.
func objContentTypeIsBounded(t *testing.T, open func(t *testing.T) ports.ObjectStorage, _ ObjectStorageCapabilities) {
	s := open(t)
	longest := "application/x-" + strings.Repeat("a", ports.MaxContentType-len("application/x-"))
	put := objPut(t, s, "longest", "x", ports.PutObjectOptions{ContentType: longest})
	if put.ContentType != longest {
		t.Fatalf("Put with a content type of %d bytes returned %d bytes", len(longest), len(put.ContentType))
	}
	if info := objStat(t, s, "longest"); info.ContentType != longest {
		t.Fatalf("Stat gives a content type of %d bytes, want the %d put", len(info.ContentType), len(longest))
	}
	for name, opts := range map[string]ports.PutObjectOptions{
		"a content type past MaxContentType": {ContentType: longest + "a"},
		"a line break in the content type":   {ContentType: "text/plain\r\nX-Other: 1"},
		"a tab in the content type":          {ContentType: "text/plain;\tcharset=utf-8"},
		"DEL in the content type":            {ContentType: "text/\x7f"},
		"a letter past ASCII":                {ContentType: "text/caf\u00e9"},
		"a line break in if_match":           {IfMatch: "abc\ndef"},
	} {
		_, err := s.Put(ctx(t), "refused", strings.NewReader("x"), opts)
		if !errors.Is(err, ports.ErrInvalidArgument) {
			t.Errorf("Put with %s: err %v, want ErrInvalidArgument", name, err)
		}
	}
	if _, err := s.Stat(ctx(t), "refused"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("after the refused Puts, Stat: %v, want ErrNotFound", err)
	}
}

func objMissingObjectIsNotFound(t *testing.T, open func(t *testing.T) ports.ObjectStorage, _ ObjectStorageCapabilities) {
	s := open(t)
	objPut(t, s, "present", "x", ports.PutObjectOptions{})
	if r, _, err := s.Get(ctx(t), "absent", ports.GetObjectOptions{}); !errors.Is(err, ports.ErrNotFound) {
		if r != nil {
			r.Close()
		}
		t.Fatalf("Get of a missing object: err %v, want ErrNotFound", err)
	}
	if r, _, err := s.Get(ctx(t), "absent", ports.GetObjectOptions{Offset: 1, Length: 1}); !errors.Is(err, ports.ErrNotFound) {
		if r != nil {
			r.Close()
		}
		t.Fatalf("ranged Get of a missing object: err %v, want ErrNotFound", err)
	}
	if _, err := s.Stat(ctx(t), "absent"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Stat of a missing object: err %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx(t), "absent"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Delete of a missing object: err %v, want ErrNotFound", err)
	}
	if keys := objKeys(objListAll(t, s, "", 0)); !slices.Equal(keys, []string{"present"}) {
		t.Fatalf("List gives %q, want only the object put", keys)
	}
}

func objDeleteRemovesTheObject(t *testing.T, open func(t *testing.T) ports.ObjectStorage, _ ObjectStorageCapabilities) {
	s := open(t)
	objPut(t, s, "gone", "soon", ports.PutObjectOptions{})
	objPut(t, s, "kept", "stays", ports.PutObjectOptions{})
	if err := s.Delete(ctx(t), "gone"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := s.Stat(ctx(t), "gone"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Stat after Delete: err %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx(t), "gone"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("second Delete: err %v, want ErrNotFound", err)
	}
	if keys := objKeys(objListAll(t, s, "", 0)); !slices.Equal(keys, []string{"kept"}) {
		t.Fatalf("List after Delete gives %q, want [kept]", keys)
	}
	if got, _ := objGet(t, s, "kept", ports.GetObjectOptions{}); got != "stays" {
		t.Fatalf("the other object reads %q after a Delete", got)
	}
}

func objTwoHandlesShareTheStore(t *testing.T, open func(t *testing.T) ports.ObjectStorage, _ ObjectStorageCapabilities) {
	a, b := open(t), open(t)
	put := objPut(t, a, "shared", "from a", ports.PutObjectOptions{})
	got, info := objGet(t, b, "shared", ports.GetObjectOptions{})
	if got != "from a" {
		t.Fatalf("the second handle reads %q, want %q", got, "from a")
	}
	objSameInfo(t, "the second handle's Get", info, put)
	if err := b.Delete(ctx(t), "shared"); err != nil {
		t.Fatalf("Delete on the second handle: %v", err)
	}
	if _, err := a.Stat(ctx(t), "shared"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Stat on the first handle after a Delete on the second: err %v, want ErrNotFound", err)
	}
}

func objInvalidKeysAreRejected(t *testing.T, open func(t *testing.T) ports.ObjectStorage, _ ObjectStorageCapabilities) {
	s := open(t)
	for _, key := range []string{"", strings.Repeat("k", 1025), "bad\xffutf8", "nul\x00key"} {
		if _, err := s.Put(ctx(t), key, strings.NewReader("x"), ports.PutObjectOptions{}); !errors.Is(err, ports.ErrInvalidArgument) {
			t.Fatalf("Put %q: err %v, want ErrInvalidArgument", key, err)
		}
		if r, _, err := s.Get(ctx(t), key, ports.GetObjectOptions{}); !errors.Is(err, ports.ErrInvalidArgument) {
			if r != nil {
				r.Close()
			}
			t.Fatalf("Get %q: err %v, want ErrInvalidArgument", key, err)
		}
		if _, err := s.Stat(ctx(t), key); !errors.Is(err, ports.ErrInvalidArgument) {
			t.Fatalf("Stat %q: err %v, want ErrInvalidArgument", key, err)
		}
		if err := s.Delete(ctx(t), key); !errors.Is(err, ports.ErrInvalidArgument) {
			t.Fatalf("Delete %q: err %v, want ErrInvalidArgument", key, err)
		}
	}
	if infos := objListAll(t, s, "", 0); len(infos) != 0 {
		t.Fatalf("refused Puts stored %q", objKeys(infos))
	}
}

// objOddKeys are keys an adapter must treat as plain names. The 1 KiB key
// is cut by slashes into parts of 200 bytes, since a file-backed S3 server
// maps each part to a file name and file names stop at 255 bytes.
var objOddKeys = []string{
	"a/b",
	"with spaces in it",
	"unicode/ключ/値/✓",
	strings.Repeat(strings.Repeat("k", 200)+"/", 6)[:1024],
}

func objOddKeysAreNames(t *testing.T, open func(t *testing.T) ports.ObjectStorage, _ ObjectStorageCapabilities) {
	s := open(t)
	want := slices.Clone(objOddKeys)
	for i, key := range want {
		objPut(t, s, key, fmt.Sprintf("content %d", i), ports.PutObjectOptions{})
	}
	for i, key := range want {
		if got, _ := objGet(t, s, key, ports.GetObjectOptions{}); got != fmt.Sprintf("content %d", i) {
			t.Fatalf("Get %q gives %q, want %q", key, got, fmt.Sprintf("content %d", i))
		}
		if info := objStat(t, s, key); info.Key != key {
			t.Fatalf("Stat %q names the key %q", key, info.Key)
		}
	}
	slices.Sort(want)
	if keys := objKeys(objListAll(t, s, "", 0)); !slices.Equal(keys, want) {
		t.Fatalf("List gives %q, want %q", keys, want)
	}
	if keys := objKeys(objListAll(t, s, "a/", 0)); !slices.Equal(keys, []string{"a/b"}) {
		t.Fatalf("List with prefix a/ gives %q, want [a/b]", keys)
	}
	for _, key := range want {
		if err := s.Delete(ctx(t), key); err != nil {
			t.Fatalf("Delete %q: %v", key, err)
		}
	}
	if infos := objListAll(t, s, "", 0); len(infos) != 0 {
		t.Fatalf("after deleting every odd key, List gives %q", objKeys(infos))
	}
}

// objControlKeys hold characters that are valid UTF-8 and no NUL, so the
// port takes them, but that XML 1.0 cannot carry: an S3 server's listing,
// which is XML, writes each as U+FFFD or cannot be read at all. Tab, line
// feed and carriage return, which XML carries, come along.
var objControlKeys = []string{"c\x01", "c\x1fx", "c\ufffex", "c\uffff", "c\tx", "c\nx", "c\rx"}

// A key is listed as it was stored, or its Put is refused as invalid: a
// listing never names an object under another key, which no call then
// finds, and never puts it out of order, which a cursor would then skip
// past others. The keys beside them, "cz" and "c\ufffd" (the character an
// S3 listing writes in their place), show that paging by one skips and
// repeats nothing.
func objAKeyWithAControlCharacterIsListedAsStoredOrRefused(t *testing.T, open func(t *testing.T) ports.ObjectStorage, _ ObjectStorageCapabilities) {
	s := open(t)
	want := []string{"c", "cz", "c\ufffd"}
	objPutMany(t, s, want)
	for _, key := range objControlKeys {
		_, err := s.Put(ctx(t), key, strings.NewReader("x"), ports.PutObjectOptions{})
		switch {
		case errors.Is(err, ports.ErrInvalidArgument):
			if _, err := s.Stat(ctx(t), key); !errors.Is(err, ports.ErrNotFound) && !errors.Is(err, ports.ErrInvalidArgument) {
				t.Fatalf("Put %q was refused, but Stat gives %v, want ErrNotFound or ErrInvalidArgument", key, err)
			}
		case err != nil:
			t.Fatalf("Put %q: %v, want success or ErrInvalidArgument", key, err)
		default:
			want = append(want, key)
			if info := objStat(t, s, key); info.Key != key {
				t.Fatalf("Stat %q names the key %q", key, info.Key)
			}
		}
	}
	slices.Sort(want)
	for _, limit := range []int{1, 0} {
		if keys := objKeys(objListAll(t, s, "", limit)); !slices.Equal(keys, want) {
			t.Fatalf("List by %d gives %q, want %q", limit, keys, want)
		}
	}
}

// objPathLikeKeys look like ways out of the store or onto other keys.
var objPathLikeKeys = []string{"../x", "d/../y", "./z", "/x", "a//b", "z/"}

// A key that looks like a path is a name like any other, or refused: it
// never reaches nor replaces another object.
func objPathLikeKeysStayInside(t *testing.T, open func(t *testing.T) ports.ObjectStorage, caps ObjectStorageCapabilities) {
	s := open(t)
	plain := []string{"a/b", "x", "y", "z"}
	for _, key := range plain {
		objPut(t, s, key, "plain "+key, ports.PutObjectOptions{})
	}
	want := slices.Clone(plain)
	for _, key := range objPathLikeKeys {
		if caps.PathLikeKeys {
			objPut(t, s, key, "odd "+key, ports.PutObjectOptions{})
			want = append(want, key)
			continue
		}
		if _, err := s.Put(ctx(t), key, strings.NewReader("odd "+key), ports.PutObjectOptions{}); !errors.Is(err, ports.ErrInvalidArgument) {
			t.Fatalf("%s: no PathLikeKeys, but Put %q gives err %v, want ErrInvalidArgument", objAdapterName(t), key, err)
		}
	}
	for _, key := range want {
		prefix := "plain "
		if !slices.Contains(plain, key) {
			prefix = "odd "
		}
		if got, _ := objGet(t, s, key, ports.GetObjectOptions{}); got != prefix+key {
			t.Fatalf("%q reads %q, want %q", key, got, prefix+key)
		}
	}
	slices.Sort(want)
	if keys := objKeys(objListAll(t, s, "", 0)); !slices.Equal(keys, want) {
		t.Fatalf("List gives %q, want %q", keys, want)
	}
}

func objNestedKeys(t *testing.T, open func(t *testing.T) ports.ObjectStorage, caps ObjectStorageCapabilities) {
	if !caps.NestedKeys {
		t.Skipf("%s: no NestedKeys", objAdapterName(t))
	}
	s := open(t)
	objPut(t, s, "a", "parent", ports.PutObjectOptions{})
	objPut(t, s, "a/b", "child", ports.PutObjectOptions{})
	objPut(t, s, "a/b/c", "grandchild", ports.PutObjectOptions{})
	for key, want := range map[string]string{"a": "parent", "a/b": "child", "a/b/c": "grandchild"} {
		if got, _ := objGet(t, s, key, ports.GetObjectOptions{}); got != want {
			t.Fatalf("%q reads %q, want %q", key, got, want)
		}
	}
	if keys := objKeys(objListAll(t, s, "a", 0)); !slices.Equal(keys, []string{"a", "a/b", "a/b/c"}) {
		t.Fatalf("List a gives %q", keys)
	}
	if err := s.Delete(ctx(t), "a/b"); err != nil {
		t.Fatalf("Delete a/b: %v", err)
	}
	if keys := objKeys(objListAll(t, s, "", 0)); !slices.Equal(keys, []string{"a", "a/b/c"}) {
		t.Fatalf("after deleting a/b, List gives %q", keys)
	}
}

// objFailingReader yields n bytes, then fails with err.
type objFailingReader struct {
	n   int
	err error
}

var errObjReader = errors.New("reader failed on purpose")

func (r *objFailingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, r.err
	}
	n := min(len(p), r.n)
	clear(p[:n])
	r.n -= n
	return n, nil
}

// A reader that fails with io.ErrUnexpectedEOF (an HTTP body whose client
// went away before the length it declared) was cut short: it has not
// ended, and its bytes are not the object. io.ReadFull answers the same
// error at a reader's own end after some bytes, so an adapter that reads
// with it must not take that error for the end.
func objFailedPutKeepsThePreviousObject(t *testing.T, open func(t *testing.T) ports.ObjectStorage, _ ObjectStorageCapabilities) {
	s := open(t)
	before := objPut(t, s, "k", "the original", ports.PutObjectOptions{})
	for _, fail := range []error{errObjReader, io.ErrUnexpectedEOF} {
		for _, n := range []int{0, 100, 12 << 20} {
			if _, err := s.Put(ctx(t), "k", &objFailingReader{n: n, err: fail}, ports.PutObjectOptions{}); err == nil {
				t.Fatalf("Put from a reader that fails with %q after %d bytes succeeded", fail, n)
			}
			got, info := objGet(t, s, "k", ports.GetObjectOptions{})
			if got != "the original" {
				t.Fatalf("after a Put failed with %q after %d bytes, k reads %d bytes", fail, n, len(got))
			}
			objSameInfo(t, "Get after a failed Put", info, before)
			if _, err := s.Put(ctx(t), "new", &objFailingReader{n: n, err: fail}, ports.PutObjectOptions{}); err == nil {
				t.Fatalf("Put of a new key from a reader that fails with %q after %d bytes succeeded", fail, n)
			}
			if _, err := s.Stat(ctx(t), "new"); !errors.Is(err, ports.ErrNotFound) {
				t.Fatalf("a Put failed with %q after %d bytes left an object: Stat err %v", fail, n, err)
			}
		}
	}
}

// A Put whose caller gives up as its reader ends, the whole content read,
// stores nothing and fails: the caller is told it failed, and the engine's
// fence, which cancels the calls it was running, relies on a store that
// does not publish a write once its context has ended (ADR 0002). For
// sizes within and past one chunk or part.
func objAPutWhoseCallerGivesUpAtItsEndStoresNothing(t *testing.T, open func(t *testing.T) ports.ObjectStorage, _ ObjectStorageCapabilities) {
	s := open(t)
	before := objPut(t, s, "k", "the original", ports.PutObjectOptions{})
	for _, n := range []int{0, 100, 12 << 20} {
		for _, key := range []string{"k", "new"} {
			c, cancel := context.WithTimeout(t.Context(), objLargeTimeout)
			r := &objCancelAtEOF{r: io.LimitReader(objZeros{}, int64(n)), cancel: cancel}
			_, err := s.Put(c, key, r, ports.PutObjectOptions{})
			cancel()
			if err == nil {
				t.Fatalf("Put of %q (%d bytes) whose caller gave up as its reader ended succeeded", key, n)
			}
		}
		got, info := objGet(t, s, "k", ports.GetObjectOptions{})
		if got != "the original" {
			t.Fatalf("after a Put of %d bytes whose caller gave up, k reads %d bytes, want the original", n, len(got))
		}
		objSameInfo(t, "Get after a Put whose caller gave up", info, before)
		if _, err := s.Stat(ctx(t), "new"); !errors.Is(err, ports.ErrNotFound) {
			t.Fatalf("a Put of %d bytes whose caller gave up left an object: Stat err %v", n, err)
		}
	}
}

// objCancelAtEOF reads r and, as r ends, cancels the Put's context before
// it reports the end.
type objCancelAtEOF struct {
	r      io.Reader
	cancel context.CancelFunc
}

func (c *objCancelAtEOF) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if errors.Is(err, io.EOF) {
		c.cancel()
	}
	return n, err
}

// objZeros is an endless reader of zero bytes.
type objZeros struct{}

func (objZeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func objRangeReads(t *testing.T, open func(t *testing.T) ports.ObjectStorage, _ ObjectStorageCapabilities) {
	s := open(t)
	var b strings.Builder
	for i := range 1000 {
		b.WriteByte(byte('a' + i%26))
	}
	content := b.String()
	objPut(t, s, "r", content, ports.PutObjectOptions{})
	for _, c := range []struct {
		offset, length int64
		want           string
	}{
		{0, 0, content},
		{10, 20, content[10:30]},
		{990, 0, content[990:]},
		{990, 100, content[990:]},
		{0, 1, content[:1]},
		{999, 1, content[999:]},
		{1000, 0, ""},
		// A length past the end stops there, however large.
		{10, math.MaxInt64, content[10:]},
		{1000, math.MaxInt64, ""},
	} {
		opts := ports.GetObjectOptions{Offset: c.offset, Length: c.length}
		got, info := objGet(t, s, "r", opts)
		if got != c.want {
			t.Fatalf("Get %+v gives %d bytes %q, want %d bytes %q", opts, len(got), got, len(c.want), c.want)
		}
		if info.Size != 1000 {
			t.Fatalf("Get %+v says size %d, want the whole object's 1000", opts, info.Size)
		}
	}
	for _, opts := range []ports.GetObjectOptions{{Offset: 1001}, {Offset: -1}, {Length: -1}} {
		r, _, err := s.Get(ctx(t), "r", opts)
		if !errors.Is(err, ports.ErrInvalidArgument) {
			if r != nil {
				r.Close()
			}
			t.Fatalf("Get %+v of a 1000-byte object: err %v, want ErrInvalidArgument", opts, err)
		}
	}
}

// objPutMany puts the keys from a few goroutines, since a server store
// takes a while for a thousand sequential round trips.
func objPutMany(t *testing.T, s ports.ObjectStorage, keys []string) {
	t.Helper()
	var wg sync.WaitGroup
	next := make(chan string)
	for range 8 {
		wg.Go(func() {
			for key := range next {
				if _, err := s.Put(ctx(t), key, strings.NewReader(key), ports.PutObjectOptions{}); err != nil {
					t.Errorf("Put %q: %v", key, err)
				}
			}
		})
	}
	for _, key := range keys {
		next <- key
	}
	close(next)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// A cursor is a place in the order of keys, not an object that must still
// be there: a page continues after it when another caller has deleted,
// since the page before, the object the page ended with.
func objListAfterACursorNoLongerStored(t *testing.T, open func(t *testing.T) ports.ObjectStorage, _ ObjectStorageCapabilities) {
	s := open(t)
	objPutMany(t, s, []string{"a", "b", "c", "d", "e"})
	infos, next, err := s.List(ctx(t), "", 2, "")
	if keys := objKeys(infos); err != nil || !slices.Equal(keys, []string{"a", "b"}) || next == "" {
		t.Fatalf("List by 2 = %q, cursor %q, %v; want [a b] and a cursor", keys, next, err)
	}
	if err := s.Delete(ctx(t), "b"); err != nil {
		t.Fatalf("Delete %q: %v", "b", err)
	}
	infos, after, err := s.List(ctx(t), "", 2, next)
	if keys := objKeys(infos); err != nil || !slices.Equal(keys, []string{"c", "d"}) || after == "" {
		t.Fatalf("List by 2 after cursor %q, whose object was deleted = %q, cursor %q, %v; want [c d] and a cursor", next, keys, after, err)
	}
}

func objListPagination(t *testing.T, open func(t *testing.T) ports.ObjectStorage, _ ObjectStorageCapabilities) {
	s := open(t)
	var want, others []string
	for i := range 1000 {
		want = append(want, fmt.Sprintf("p/%04d", (i*7919)%1000))
	}
	for i := range 20 {
		others = append(others, fmt.Sprintf("q/%02d", i))
	}
	others = append(others, "p0", "p.txt", "o/9999")
	objPutMany(t, s, append(slices.Clone(want), others...))
	slices.Sort(want)

	for _, limit := range []int{100, 333, 999, ports.MaxPage} {
		if keys := objKeys(objListAll(t, s, "p/", limit)); !slices.Equal(keys, want) {
			t.Fatalf("paging by %d through prefix p/ gives %d keys (first %q), want the 1000 in order", limit, len(keys), keys[:min(3, len(keys))])
		}
	}
	page, next, err := s.List(ctx(t), "p/", 0, "")
	if err != nil {
		t.Fatalf("List with the default limit: %v", err)
	}
	if len(page) != 100 || next == "" {
		t.Fatalf("List with limit 0 gives %d objects and cursor %q, want a page of 100 and a cursor", len(page), next)
	}
	second, _, err := s.List(ctx(t), "p/", 10, next)
	if err != nil {
		t.Fatalf("List after the cursor: %v", err)
	}
	if keys := objKeys(second); !slices.Equal(keys, want[100:110]) {
		t.Fatalf("the page after the cursor gives %q, want %q", keys, want[100:110])
	}
	all := objKeys(objListAll(t, s, "", 250))
	if len(all) != len(want)+len(others) || !slices.IsSorted(all) {
		t.Fatalf("List without a prefix gives %d keys (sorted: %v), want %d in order", len(all), slices.IsSorted(all), len(want)+len(others))
	}
	if infos := objListAll(t, s, "nothing/", 10); len(infos) != 0 {
		t.Fatalf("a prefix matching nothing lists %q", objKeys(infos))
	}
}

func objListDescribesObjects(t *testing.T, open func(t *testing.T) ports.ObjectStorage, _ ObjectStorageCapabilities) {
	s := open(t)
	put := map[string]ports.ObjectInfo{
		"one": objPut(t, s, "one", "1", ports.PutObjectOptions{}),
		"two": objPut(t, s, "two", "twenty-two", ports.PutObjectOptions{}),
	}
	for _, info := range objListAll(t, s, "", 0) {
		objSameInfo(t, "List's entry for "+info.Key, info, put[info.Key])
	}
}

// objHeap returns the live heap: the bytes still reachable after a
// collection, so garbage waiting for the collector is not counted.
func objHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// objHeapPeak records the largest live heap seen while bytes stream.
type objHeapPeak struct {
	peak    uint64
	pending int
}

// streamed counts n bytes and samples the heap every objHeapSampleEvery.
func (p *objHeapPeak) streamed(n int) {
	p.pending += n
	if p.pending >= objHeapSampleEvery {
		p.pending = 0
		p.peak = max(p.peak, objHeap())
	}
}

// objGenerated yields size pseudo-random bytes, hashing them as they go,
// so a large object never exists whole in the test either.
type objGenerated struct {
	rng  *rand.ChaCha8
	left int64
	sum  hash.Hash
	heap *objHeapPeak
}

func (g *objGenerated) Read(p []byte) (int, error) {
	if g.left == 0 {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), g.left))
	g.rng.Read(p[:n])
	g.sum.Write(p[:n])
	g.left -= int64(n)
	g.heap.streamed(n)
	return n, nil
}

func objMiB(n uint64) float64 { return float64(n) / (1 << 20) }

// The live heap is sampled while the object streams. An adapter that keeps
// the object in memory (the memory adapter) may keep it after Put returns,
// so Put is judged by how far its peak rose above what stayed.
func objLargeObjectStreamsInBoundedMemory(t *testing.T, open func(t *testing.T) ports.ObjectStorage, _ ObjectStorageCapabilities) {
	s := open(t)
	var seed [32]byte
	copy(seed[:], t.Name())
	gen := &objGenerated{rng: rand.NewChaCha8(seed), left: objLargeSize, sum: sha256.New(), heap: &objHeapPeak{}}

	c, cancel := context.WithTimeout(t.Context(), objLargeTimeout)
	t.Cleanup(cancel)
	base := objHeap()
	info, err := s.Put(c, "large", gen, ports.PutObjectOptions{})
	if err != nil {
		t.Fatalf("Put of %d MiB: %v", objLargeSize>>20, err)
	}
	kept := max(objHeap(), base)
	if info.Size != objLargeSize {
		t.Fatalf("Put of %d bytes reports size %d", objLargeSize, info.Size)
	}
	if gen.heap.peak > kept && gen.heap.peak-kept > objHeapSlack {
		t.Fatalf("Put of %d MiB raised the live heap to %.1f MiB above what it keeps (%.1f MiB over the start): it buffers the object",
			objLargeSize>>20, objMiB(gen.heap.peak-kept), objMiB(kept-base))
	}
	want := gen.sum.Sum(nil)

	c, cancel = context.WithTimeout(t.Context(), objLargeTimeout)
	t.Cleanup(cancel)
	base = objHeap()
	r, got, err := s.Get(c, "large", ports.GetObjectOptions{})
	if err != nil {
		t.Fatalf("Get of %d MiB: %v", objLargeSize>>20, err)
	}
	if r == nil {
		t.Fatalf("Get of %d MiB returned no reader and no error", objLargeSize>>20)
	}
	t.Cleanup(func() { r.Close() })
	if got.Size != objLargeSize {
		t.Fatalf("Get reports size %d, want %d", got.Size, objLargeSize)
	}
	sum, heap := sha256.New(), &objHeapPeak{}
	buf := make([]byte, 256<<10)
	var read int64
	for {
		n, err := r.Read(buf)
		sum.Write(buf[:n])
		read += int64(n)
		heap.streamed(n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading the large object after %d bytes: %v", read, err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatalf("closing the large object: %v", err)
	}
	if read != objLargeSize || !bytes.Equal(sum.Sum(nil), want) {
		t.Fatalf("Get gave %d bytes with sha256 %x, want %d bytes with %x", read, sum.Sum(nil), objLargeSize, want)
	}
	if heap.peak > base && heap.peak-base > objHeapSlack {
		t.Fatalf("Get of %d MiB raised the live heap by %.1f MiB: it buffers the object", objLargeSize>>20, objMiB(heap.peak-base))
	}
}

func objPutIfAbsent(t *testing.T, open func(t *testing.T) ports.ObjectStorage, caps ObjectStorageCapabilities) {
	objNeedConditional(t, caps)
	s := open(t)
	first := objPut(t, s, "once", "first", ports.PutObjectOptions{IfAbsent: true})
	if _, err := s.Put(ctx(t), "once", strings.NewReader("second"), ports.PutObjectOptions{IfAbsent: true}); !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("IfAbsent Put over an object: err %v, want ErrConflict", err)
	}
	got, info := objGet(t, s, "once", ports.GetObjectOptions{})
	if got != "first" {
		t.Fatalf("a refused IfAbsent Put left %q", got)
	}
	objSameInfo(t, "Get after a refused Put", info, first)
	if err := s.Delete(ctx(t), "once"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	objPut(t, s, "once", "again", ports.PutObjectOptions{IfAbsent: true})
}

func objPutIfMatch(t *testing.T, open func(t *testing.T) ports.ObjectStorage, caps ObjectStorageCapabilities) {
	objNeedConditional(t, caps)
	s := open(t)
	v1 := objPut(t, s, "k", "one", ports.PutObjectOptions{})
	v2 := objPut(t, s, "k", "two", ports.PutObjectOptions{IfMatch: v1.ETag})
	if _, err := s.Put(ctx(t), "k", strings.NewReader("three"), ports.PutObjectOptions{IfMatch: v1.ETag}); !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("Put at a stale ETag: err %v, want ErrConflict", err)
	}
	got, info := objGet(t, s, "k", ports.GetObjectOptions{})
	if got != "two" {
		t.Fatalf("after a refused IfMatch Put, k reads %q, want %q", got, "two")
	}
	objSameInfo(t, "Get after a refused Put", info, v2)
	if _, err := s.Put(ctx(t), "absent", strings.NewReader("x"), ports.PutObjectOptions{IfMatch: v1.ETag}); !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("IfMatch Put of a missing key: err %v, want ErrConflict", err)
	}
	if _, err := s.Stat(ctx(t), "absent"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("a refused IfMatch Put created the key: Stat err %v", err)
	}
	both := ports.PutObjectOptions{IfAbsent: true, IfMatch: v2.ETag}
	if _, err := s.Put(ctx(t), "k", strings.NewReader("four"), both); !errors.Is(err, ports.ErrInvalidArgument) {
		t.Fatalf("Put with IfAbsent and IfMatch: err %v, want ErrInvalidArgument", err)
	}
}

// objSized yields n bytes of one letter, for objects larger than an
// adapter's single request or part.
func objSized(n int, letter byte) io.Reader {
	return io.LimitReader(objRepeat(letter), int64(n))
}

type objRepeat byte

func (r objRepeat) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// A large object may travel in parts; its conditions must hold for the
// object as published, not for a part.
func objConditionalPutOfALargeObject(t *testing.T, open func(t *testing.T) ports.ObjectStorage, caps ObjectStorageCapabilities) {
	objNeedConditional(t, caps)
	s := open(t)
	const size = 20 << 20
	c, cancel := context.WithTimeout(t.Context(), objLargeTimeout)
	t.Cleanup(cancel)
	first, err := s.Put(c, "big", objSized(size, 'a'), ports.PutObjectOptions{IfAbsent: true})
	if err != nil {
		t.Fatalf("IfAbsent Put of %d MiB: %v", size>>20, err)
	}
	if _, err := s.Put(c, "big", objSized(size, 'b'), ports.PutObjectOptions{IfAbsent: true}); !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("second IfAbsent Put of %d MiB: err %v, want ErrConflict", size>>20, err)
	}
	if _, err := s.Put(c, "big", objSized(size, 'c'), ports.PutObjectOptions{IfMatch: "not-the-etag"}); !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("IfMatch Put of %d MiB at a wrong ETag: err %v, want ErrConflict", size>>20, err)
	}
	if got, _ := objGet(t, s, "big", ports.GetObjectOptions{Offset: size - 4}); got != "aaaa" {
		t.Fatalf("after refused Puts the object ends in %q, want the first Put's aaaa", got)
	}
	objSameInfo(t, "Stat after refused Puts", objStat(t, s, "big"), first)
	second, err := s.Put(c, "big", objSized(size, 'd'), ports.PutObjectOptions{IfMatch: first.ETag})
	if err != nil {
		t.Fatalf("IfMatch Put of %d MiB at the current ETag: %v", size>>20, err)
	}
	if second.ETag == first.ETag || second.Size != size {
		t.Fatalf("IfMatch Put returned %+v after %+v", second, first)
	}
	if got, _ := objGet(t, s, "big", ports.GetObjectOptions{Offset: 5, Length: 3}); got != "ddd" {
		t.Fatalf("after the IfMatch Put the object reads %q, want ddd", got)
	}
}

// objRacerContent differs for every racer of every round, so that with
// ETags made from the content no Put rewrites the ETag another expects.
func objRacerContent(round, racer int) string { return fmt.Sprintf("round %d, racer %d", round, racer) }

// objRace runs one Put per racer, alternating between two handles, all
// released at once, and returns the index of the only winner.
func objRace(t *testing.T, a, b ports.ObjectStorage, round int, key string, opts ports.PutObjectOptions) int {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, objRacers)
	start := make(chan struct{})
	for i := range objRacers {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			<-start
			_, errs[i] = s.Put(ctx(t), key, strings.NewReader(objRacerContent(round, i)), opts)
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("round %d: racers %d and %d both won %+v on %q", round, winner, i, opts, key)
		case err == nil:
			winner = i
		case !errors.Is(err, ports.ErrConflict):
			t.Fatalf("round %d: racer %d: %v", round, i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("round %d: no racer won %+v on %q", round, opts, key)
	}
	if got, _ := objGet(t, a, key, ports.GetObjectOptions{}); got != objRacerContent(round, winner) {
		t.Fatalf("round %d: racer %d won, but %q holds %q", round, winner, key, got)
	}
	return winner
}

func objPutIfAbsentRace(t *testing.T, open func(t *testing.T) ports.ObjectStorage, caps ObjectStorageCapabilities) {
	objNeedConditional(t, caps)
	a, b := open(t), open(t)
	for round := range objRaceRounds {
		objRace(t, a, b, round, fmt.Sprintf("race-%d", round), ports.PutObjectOptions{IfAbsent: true})
	}
}

func objPutIfMatchRace(t *testing.T, open func(t *testing.T) ports.ObjectStorage, caps ObjectStorageCapabilities) {
	objNeedConditional(t, caps)
	a, b := open(t), open(t)
	etag := objPut(t, a, "cas", "start", ports.PutObjectOptions{}).ETag
	for round := range objRaceRounds {
		objRace(t, a, b, round, "cas", ports.PutObjectOptions{IfMatch: etag})
		etag = objStat(t, a, "cas").ETag
	}
}

// objNeedConditionalDelete returns the store as a
// ports.ConditionalObjectDeleter, or skips: the interface is optional.
func objNeedConditionalDelete(t *testing.T, s ports.ObjectStorage) ports.ConditionalObjectDeleter {
	t.Helper()
	d, ok := s.(ports.ConditionalObjectDeleter)
	if !ok {
		t.Skipf("%s: no ports.ConditionalObjectDeleter", objAdapterName(t))
	}
	return d
}

func objDeleteIfMatch(t *testing.T, open func(t *testing.T) ports.ObjectStorage, _ ObjectStorageCapabilities) {
	a, b := open(t), open(t)
	da, db := objNeedConditionalDelete(t, a), objNeedConditionalDelete(t, b)
	v1 := objPut(t, a, "k", "one", ports.PutObjectOptions{})
	v2 := objPut(t, b, "k", "two", ports.PutObjectOptions{})
	if ok, err := da.DeleteIfMatch(ctx(t), "k", v1.ETag); ok || err != nil {
		t.Fatalf("DeleteIfMatch at the ETag of an object put over since = %v, %v; want false, no error", ok, err)
	}
	got, info := objGet(t, a, "k", ports.GetObjectOptions{})
	if got != "two" {
		t.Fatalf("after a DeleteIfMatch at a stale ETag, k reads %q, want %q", got, "two")
	}
	objSameInfo(t, "Get after a DeleteIfMatch at a stale ETag", info, v2)
	// Through the other handle: the condition is the store's, not a handle's.
	if ok, err := db.DeleteIfMatch(ctx(t), "k", v2.ETag); !ok || err != nil {
		t.Fatalf("DeleteIfMatch at the current ETag = %v, %v; want true", ok, err)
	}
	if _, err := a.Stat(ctx(t), "k"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Stat after DeleteIfMatch at the current ETag: err %v, want ErrNotFound", err)
	}
	if ok, err := da.DeleteIfMatch(ctx(t), "k", v2.ETag); ok || err != nil {
		t.Fatalf("DeleteIfMatch of a key deleted = %v, %v; want false, no error", ok, err)
	}
	if ok, err := da.DeleteIfMatch(ctx(t), "never", v2.ETag); ok || err != nil {
		t.Fatalf("DeleteIfMatch of a key never stored = %v, %v; want false, no error", ok, err)
	}
	v3 := objPut(t, a, "k", "three", ports.PutObjectOptions{})
	for _, c := range []struct{ what, key, etag string }{
		{"an empty ETag", "k", ""},
		{"an empty key", "", v3.ETag},
		{"a key holding a NUL", "k\x00", v3.ETag},
	} {
		if ok, err := da.DeleteIfMatch(ctx(t), c.key, c.etag); ok || !errors.Is(err, ports.ErrInvalidArgument) {
			t.Errorf("DeleteIfMatch with %s = %v, %v; want ErrInvalidArgument", c.what, ok, err)
		}
	}
	if got, _ := objGet(t, a, "k", ports.GetObjectOptions{}); got != "three" {
		t.Fatalf("after refused DeleteIfMatch calls, k reads %q, want %q", got, "three")
	}
}

// objDeleteIfMatchRounds is how many times a Put races a DeleteIfMatch of
// the object it replaces.
const objDeleteIfMatchRounds = 300

// A DeleteIfMatch of the object a Put replaces removes the old object or
// nothing, never the new one: whichever comes first, the key holds what
// the Put stored.
func objDeleteIfMatchNeverRemovesAPutAfterIt(t *testing.T, open func(t *testing.T) ports.ObjectStorage, _ ObjectStorageCapabilities) {
	a, b := open(t), open(t)
	db := objNeedConditionalDelete(t, b)
	deleted := 0
	for round := range objDeleteIfMatchRounds {
		old := objPut(t, a, "k", fmt.Sprintf("round %d, old", round), ports.PutObjectOptions{})
		again := fmt.Sprintf("round %d, put again", round)
		var (
			wg     sync.WaitGroup
			putErr error
			ok     bool
			delErr error
		)
		start := make(chan struct{})
		wg.Go(func() {
			<-start
			_, putErr = a.Put(ctx(t), "k", strings.NewReader(again), ports.PutObjectOptions{})
		})
		wg.Go(func() {
			<-start
			ok, delErr = db.DeleteIfMatch(ctx(t), "k", old.ETag)
		})
		close(start)
		wg.Wait()
		if putErr != nil || delErr != nil {
			t.Fatalf("round %d: Put: %v; DeleteIfMatch: %v", round, putErr, delErr)
		}
		if ok {
			deleted++
		}
		r, _, err := a.Get(ctx(t), "k", ports.GetObjectOptions{})
		if err != nil {
			t.Fatalf("round %d: the Put's object is gone after a DeleteIfMatch of the one it replaced (DeleteIfMatch said %v): Get: %v", round, ok, err)
		}
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil || string(got) != again {
			t.Fatalf("round %d: k reads %q, %v; want the Put's %q", round, got, err, again)
		}
	}
	t.Logf("%d of %d DeleteIfMatch calls came before the Put", deleted, objDeleteIfMatchRounds)
}
