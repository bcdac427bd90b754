package contracttests

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/abi-engine/engine/ports"
)

// KeyValueCapabilities are what an adapter offers beyond the core contract.
type KeyValueCapabilities struct {
	// Durable: the data outlives every handle. Handles then implement
	// io.Closer, and closing one twice is harmless.
	Durable bool
	// Fenced: as DocumentCapabilities.Fenced says, for keyvalue writes.
	Fenced bool
	// KeepsReads: the store keeps what it reads under a serving term and
	// answers it again from memory (ports.QuickGetter), until the term ends
	// (ports.TermEnder) or the fence shows it over. It must be Fenced too.
	// Two handles on one store stand for two engines.
	KeepsReads bool
}

const (
	// kvRacers is how many callers race on two handles.
	kvRacers = 16
	// kvRaceRounds is how many times each race runs.
	kvRaceRounds = 10
	// kvShortTTL is the TTL of keys that must expire during a test.
	kvShortTTL = time.Second
)

// RunKeyValue holds a key-value adapter to the ports.KeyValue contract.
func RunKeyValue(t *testing.T, h Harness[ports.KeyValue], caps KeyValueCapabilities) {
	cases := []kvCase{
		{"EmptyStore", kvEmptyStore},
		{"SetThenGet", kvSetThenGet},
		{"SetOverwrites", kvSetOverwrites},
		{"GetMissingIsNotFound", kvGetMissingIsNotFound},
		{"SetIfAbsent", kvSetIfAbsent},
		{"Delete", kvDelete},
		{"DeleteIfValue", kvDeleteIfValue},
		{"Exists", kvExists},
		{"EmptyAndBinaryValues", kvEmptyAndBinaryValues},
		{"ValuesAreCopied", kvValuesAreCopied},
		{"OddKeys", kvOddKeys},
		{"InvalidKeys", kvInvalidKeys},
		{"NegativeTTLIsInvalid", kvNegativeTTLIsInvalid},
		{"TTLIsBounded", kvTTLIsBounded},
		{"ListKeysLimitIsBounded", kvListKeysLimitIsBounded},
		{"ListKeysRefusesInvalidPrefixesAndCursors", kvListKeysRefusesInvalidPrefixesAndCursors},
		{"TTLExpiry", kvTTLExpiry},
		{"TTLBelowASecondExpires", kvTTLBelowASecondExpires},
		{"SetWithoutTTLClearsTheTTL", kvSetWithoutTTLClearsTheTTL},
		{"HandlesShareTheStore", kvHandlesShareTheStore},
		{"SetIfAbsentRace", kvSetIfAbsentRace},
		{"SetIfAbsentRaceOverAnExpiredKey", kvSetIfAbsentRaceOverAnExpiredKey},
		{"DeleteIfValueRace", kvDeleteIfValueRace},
		{"WritesAreLinearizable", kvWritesAreLinearizable},
		{"ListKeysPagination", kvListKeysPagination},
		{"ListKeysDefaultPageSize", kvListKeysDefaultPageSize},
		{"ListKeysPrefixIsLiteral", kvListKeysPrefixIsLiteral},
		{"ListKeysLastPageHasNoCursor", kvListKeysLastPageHasNoCursor},
		{"ListKeysAfterACursorNoLongerStored", kvListKeysAfterACursorNoLongerStored},
		{"DeleteExpired", kvDeleteExpired},
		{"Durable", func(t *testing.T, open func(t *testing.T) ports.KeyValue) {
			if !caps.Durable {
				t.Skipf("%s: no durability", adapterName(t))
			}
			kvDurable(t, open)
		}},
		{"AnOlderTermIsFenced", func(t *testing.T, open func(t *testing.T) ports.KeyValue) {
			if !caps.Fenced {
				t.Skipf("%s: not fenced", adapterName(t))
			}
			kvFencing(t, open)
		}},
	}
	for _, c := range kvKeptReadCases {
		cases = append(cases, kvCase{c.name, func(t *testing.T, open func(t *testing.T) ports.KeyValue) {
			if !caps.KeepsReads {
				t.Skipf("%s: keeps no reads", adapterName(t))
			}
			c.run(t, open)
		}})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newStore(t, h))
		})
	}
}

// kvCase is one case of the keyvalue contract, run on fresh handles of a
// fresh store.
type kvCase struct {
	name string
	run  func(t *testing.T, open func(t *testing.T) ports.KeyValue)
}

// adapterName is the adapter's subtest name: TestXContract/<adapter>/<Case>.
func adapterName(t *testing.T) string {
	parts := strings.Split(t.Name(), "/")
	if len(parts) < 3 {
		return t.Name()
	}
	return parts[len(parts)-2]
}

func kvSet(t *testing.T, kv ports.KeyValue, key string, value []byte, ttl time.Duration) {
	t.Helper()
	if err := kv.Set(ctx(t), key, value, ttl); err != nil {
		t.Fatalf("Set %q: %v", key, err)
	}
}

func kvMustGet(t *testing.T, kv ports.KeyValue, key string, want []byte) {
	t.Helper()
	got, err := kv.Get(ctx(t), key)
	if err != nil {
		t.Fatalf("Get %q: %v", key, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Get %q = %q, want %q", key, got, want)
	}
}

func kvMustBeMissing(t *testing.T, kv ports.KeyValue, key string) {
	t.Helper()
	if v, err := kv.Get(ctx(t), key); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Get %q = %q, %v; want ErrNotFound", key, v, err)
	}
}

func kvMustExist(t *testing.T, kv ports.KeyValue, key string, want bool) {
	t.Helper()
	ok, err := kv.Exists(ctx(t), key)
	if err != nil {
		t.Fatalf("Exists %q: %v", key, err)
	}
	if ok != want {
		t.Fatalf("Exists %q = %v, want %v", key, ok, want)
	}
}

// kvAllKeys pages through ListKeys and fails on a duplicate or a key out of
// order.
func kvAllKeys(t *testing.T, kv ports.KeyValue, prefix string, limit int) []string {
	t.Helper()
	var all []string
	cursor := ""
	for page := 0; ; page++ {
		if page > 10_000 {
			t.Fatalf("ListKeys %q: more than 10000 pages, the cursor does not advance", prefix)
		}
		keys, next, err := kv.ListKeys(ctx(t), prefix, limit, cursor)
		if err != nil {
			t.Fatalf("ListKeys %q after %q: %v", prefix, cursor, err)
		}
		if limit > 0 && len(keys) > limit {
			t.Fatalf("ListKeys %q: %d keys on a page of %d", prefix, len(keys), limit)
		}
		for _, k := range keys {
			if !strings.HasPrefix(k, prefix) {
				t.Fatalf("ListKeys %q gave %q", prefix, k)
			}
			if n := len(all); n > 0 && k <= all[n-1] {
				t.Fatalf("ListKeys %q gave %q after %q: out of order or repeated", prefix, k, all[n-1])
			}
			all = append(all, k)
		}
		if next == "" {
			return all
		}
		if len(keys) == 0 {
			t.Fatalf("ListKeys %q: an empty page with next cursor %q", prefix, next)
		}
		cursor = next
	}
}

func kvEmptyStore(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	kv := open(t)
	kvMustBeMissing(t, kv, "k")
	kvMustExist(t, kv, "k", false)
	keys, next, err := kv.ListKeys(ctx(t), "", 0, "")
	if err != nil || len(keys) != 0 || next != "" {
		t.Fatalf("ListKeys on an empty store = %q, %q, %v; want nothing", keys, next, err)
	}
	if ok, err := kv.Delete(ctx(t), "k"); err != nil || ok {
		t.Fatalf("Delete on an empty store = %v, %v; want false", ok, err)
	}
	if ok, err := kv.DeleteIfValue(ctx(t), "k", []byte("v")); err != nil || ok {
		t.Fatalf("DeleteIfValue on an empty store = %v, %v; want false", ok, err)
	}
}

func kvSetThenGet(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	kv := open(t)
	kvSet(t, kv, "k", []byte("v"), 0)
	kvSet(t, kv, "other", []byte("w"), 0)
	kvMustGet(t, kv, "k", []byte("v"))
	kvMustGet(t, kv, "other", []byte("w"))
}

func kvSetOverwrites(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	kv := open(t)
	kvSet(t, kv, "k", []byte("first"), 0)
	kvSet(t, kv, "k", []byte("second"), 0)
	kvMustGet(t, kv, "k", []byte("second"))
	if keys := kvAllKeys(t, kv, "", 0); !slices.Equal(keys, []string{"k"}) {
		t.Fatalf("keys after an overwrite = %q, want [k]", keys)
	}
}

func kvGetMissingIsNotFound(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	kv := open(t)
	kvSet(t, kv, "k", []byte("v"), 0)
	kvMustBeMissing(t, kv, "k2")
	kvMustBeMissing(t, kv, "K")
}

func kvSetIfAbsent(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	kv := open(t)
	ok, err := kv.SetIfAbsent(ctx(t), "k", []byte("first"), 0)
	if err != nil || !ok {
		t.Fatalf("SetIfAbsent on a missing key = %v, %v; want true", ok, err)
	}
	ok, err = kv.SetIfAbsent(ctx(t), "k", []byte("second"), 0)
	if err != nil || ok {
		t.Fatalf("SetIfAbsent on a present key = %v, %v; want false", ok, err)
	}
	kvMustGet(t, kv, "k", []byte("first"))
}

func kvDelete(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	kv := open(t)
	kvSet(t, kv, "k", []byte("v"), 0)
	kvSet(t, kv, "keep", []byte("v"), 0)
	if ok, err := kv.Delete(ctx(t), "k"); err != nil || !ok {
		t.Fatalf("Delete = %v, %v; want true", ok, err)
	}
	kvMustBeMissing(t, kv, "k")
	if ok, err := kv.Delete(ctx(t), "k"); err != nil || ok {
		t.Fatalf("second Delete = %v, %v; want false", ok, err)
	}
	kvMustGet(t, kv, "keep", []byte("v"))
}

func kvDeleteIfValue(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	kv := open(t)
	kvSet(t, kv, "k", []byte("v1"), 0)
	for _, wrong := range [][]byte{[]byte("v2"), []byte("v"), []byte("v1 "), {}} {
		if ok, err := kv.DeleteIfValue(ctx(t), "k", wrong); err != nil || ok {
			t.Fatalf("DeleteIfValue with %q = %v, %v; want false", wrong, ok, err)
		}
	}
	kvMustGet(t, kv, "k", []byte("v1"))
	if ok, err := kv.DeleteIfValue(ctx(t), "k", []byte("v1")); err != nil || !ok {
		t.Fatalf("DeleteIfValue with the value = %v, %v; want true", ok, err)
	}
	kvMustBeMissing(t, kv, "k")
	if ok, err := kv.DeleteIfValue(ctx(t), "k", []byte("v1")); err != nil || ok {
		t.Fatalf("DeleteIfValue on a deleted key = %v, %v; want false", ok, err)
	}
}

func kvExists(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	kv := open(t)
	kvMustExist(t, kv, "k", false)
	kvSet(t, kv, "k", []byte("v"), 0)
	kvMustExist(t, kv, "k", true)
	kvMustExist(t, kv, "k/", false)
	if _, err := kv.Delete(ctx(t), "k"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	kvMustExist(t, kv, "k", false)
}

func kvEmptyAndBinaryValues(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	kv := open(t)
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	values := map[string][]byte{
		"empty":   {},
		"nil":     nil,
		"bytes":   all,
		"nul":     {0},
		"invalid": {0xff, 0xfe, 0x00, 0xc3},
		"large":   bytes.Repeat([]byte{0, 1, 2, 0xff}, 64<<10),
	}
	for k, v := range values {
		kvSet(t, kv, k, v, 0)
	}
	for k, v := range values {
		kvMustGet(t, kv, k, v)
		kvMustExist(t, kv, k, true)
	}
	if ok, err := kv.SetIfAbsent(ctx(t), "empty", []byte("x"), 0); err != nil || ok {
		t.Fatalf("SetIfAbsent over an empty value = %v, %v; want false: an empty value is a value", ok, err)
	}
	if ok, err := kv.DeleteIfValue(ctx(t), "bytes", all[:255]); err != nil || ok {
		t.Fatalf("DeleteIfValue with a shorter value = %v, %v; want false", ok, err)
	}
	if ok, err := kv.DeleteIfValue(ctx(t), "empty", nil); err != nil || !ok {
		t.Fatalf("DeleteIfValue of an empty value = %v, %v; want true", ok, err)
	}
	if ok, err := kv.DeleteIfValue(ctx(t), "bytes", all); err != nil || !ok {
		t.Fatalf("DeleteIfValue of binary bytes = %v, %v; want true", ok, err)
	}
}

func kvValuesAreCopied(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	kv := open(t)
	v := []byte("value")
	kvSet(t, kv, "k", v, 0)
	v[0] = 'X'
	got, err := kv.Get(ctx(t), "k")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if string(got) != "value" {
		t.Fatalf("Get = %q after the caller changed its slice: the store kept the caller's memory", got)
	}
	got[0] = 'Y'
	kvMustGet(t, kv, "k", []byte("value"))
}

// kvOddKeyList are keys adapters must store as plain strings.
func kvOddKeyList() []string {
	return []string{
		"a/b",
		"../x",
		"/leading/slash",
		"with spaces ",
		" ",
		"unicode-é-日本-🙂",
		"quote'\"back\\slash",
		"percent%under_score*star?",
		"a\nnewline\ttab",
		strings.Repeat("k", 1024),
		strings.Repeat("é", 512),
	}
}

func kvOddKeys(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	kv, other := open(t), open(t)
	keys := kvOddKeyList()
	for i, k := range keys {
		kvSet(t, kv, k, []byte(fmt.Sprint(i)), 0)
	}
	for i, k := range keys {
		kvMustGet(t, other, k, []byte(fmt.Sprint(i)))
		kvMustExist(t, other, k, true)
	}
	want := slices.Clone(keys)
	slices.Sort(want)
	if got := kvAllKeys(t, other, "", 3); !slices.Equal(got, want) {
		t.Fatalf("ListKeys = %q, want %q", got, want)
	}
	if got := kvAllKeys(t, other, "../", 0); !slices.Equal(got, []string{"../x"}) {
		t.Fatalf("ListKeys ../ = %q, want [../x]", got)
	}
	kvMustBeMissing(t, other, "x")
	kvMustBeMissing(t, other, "a")
	for _, k := range keys {
		if ok, err := other.Delete(ctx(t), k); err != nil || !ok {
			t.Fatalf("Delete %q = %v, %v; want true", k, ok, err)
		}
	}
	if got := kvAllKeys(t, kv, "", 0); len(got) != 0 {
		t.Fatalf("ListKeys after deleting every key = %q", got)
	}
}

func kvInvalidKeys(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	kv := open(t)
	for _, key := range []string{"", strings.Repeat("k", 1025), "bad\xffutf8"} {
		calls := map[string]error{}
		_, calls["Get"] = kv.Get(ctx(t), key)
		calls["Set"] = kv.Set(ctx(t), key, []byte("v"), 0)
		_, calls["SetIfAbsent"] = kv.SetIfAbsent(ctx(t), key, []byte("v"), 0)
		_, calls["Delete"] = kv.Delete(ctx(t), key)
		_, calls["DeleteIfValue"] = kv.DeleteIfValue(ctx(t), key, []byte("v"))
		_, calls["Exists"] = kv.Exists(ctx(t), key)
		for name, err := range calls {
			if !errors.Is(err, ports.ErrInvalidArgument) {
				t.Errorf("%s with key %.20q (%d bytes): err %v, want ErrInvalidArgument", name, key, len(key), err)
			}
		}
	}
	if got := kvAllKeys(t, kv, "", 0); len(got) != 0 {
		t.Fatalf("refused writes stored %q", got)
	}
}

func kvNegativeTTLIsInvalid(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	kv := open(t)
	if err := kv.Set(ctx(t), "k", []byte("v"), -time.Second); !errors.Is(err, ports.ErrInvalidArgument) {
		t.Fatalf("Set with a negative TTL: err %v, want ErrInvalidArgument", err)
	}
	if _, err := kv.SetIfAbsent(ctx(t), "k", []byte("v"), -time.Second); !errors.Is(err, ports.ErrInvalidArgument) {
		t.Fatalf("SetIfAbsent with a negative TTL: err %v, want ErrInvalidArgument", err)
	}
	kvMustBeMissing(t, kv, "k")
}

// kvAwaitExpiry polls key until Get says it is gone, within the call timeout.
// writer is the method that stored key with kvShortTTL, named when it stays.
func kvAwaitExpiry(t *testing.T, kv ports.KeyValue, key, writer string) {
	t.Helper()
	deadline := time.Now().Add(callTimeout)
	for {
		_, err := kv.Get(ctx(t), key)
		if errors.Is(err, ports.ErrNotFound) {
			return
		}
		if err != nil {
			t.Fatalf("Get %q: %v", key, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %q with a TTL of %v: Get still returns it after %v; %s kept the TTL too long or dropped it, or Get ignores expiry",
				writer, key, kvShortTTL, callTimeout, writer)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Each expiring key is touched by one method only after expiry, so a store
// that forgets an expired key on Get does not pass ListKeys by accident. The
// polled key is written last, so every other expires no later than it.
func kvTTLExpiry(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	kv, other := open(t), open(t)
	kvSet(t, kv, "keep/none", []byte("v"), 0)
	kvSet(t, kv, "keep/long", []byte("v"), time.Hour)
	if ok, err := kv.SetIfAbsent(ctx(t), "keep/absent", []byte("v"), time.Hour); err != nil || !ok {
		t.Fatalf("SetIfAbsent with a TTL = %v, %v; want true", ok, err)
	}
	for _, k := range []string{"ttl/list", "ttl/exists", "ttl/setifabsent", "ttl/delete", "ttl/deleteifvalue"} {
		kvSet(t, kv, k, []byte("old"), kvShortTTL)
	}
	if ok, err := kv.SetIfAbsent(ctx(t), "ttl/get", []byte("old"), kvShortTTL); err != nil || !ok {
		t.Fatalf("SetIfAbsent with a short TTL = %v, %v; want true", ok, err)
	}
	kvAwaitExpiry(t, other, "ttl/get", "SetIfAbsent")

	want := []string{"keep/absent", "keep/long", "keep/none"}
	if got := kvAllKeys(t, other, "", 0); !slices.Equal(got, want) {
		for _, k := range got {
			if !slices.Contains(want, k) {
				expiredShown(t, other.Get, kvShortTTL, k, "Set", "ListKeys")
			}
		}
		t.Fatalf("ListKeys after expiry = %q, want %q", got, want)
	}
	if ok, err := other.Exists(ctx(t), "ttl/exists"); err != nil || ok {
		if err != nil {
			t.Fatalf("Exists %q: %v", "ttl/exists", err)
		}
		expiredShown(t, other.Get, kvShortTTL, "ttl/exists", "Set", "Exists")
		t.FailNow()
	}
	ok, err := other.SetIfAbsent(ctx(t), "ttl/setifabsent", []byte("new"), 0)
	if err != nil {
		t.Fatalf("SetIfAbsent over an expired key: %v", err)
	}
	if !ok {
		expiredShown(t, other.Get, kvShortTTL, "ttl/setifabsent", "Set", "SetIfAbsent")
		t.FailNow()
	}
	kvMustGet(t, kv, "ttl/setifabsent", []byte("new"))
	// Delete and DeleteIfValue remove what they find, so a wrong answer
	// cannot be traced back with Get: the cases above have already judged
	// Set's TTL by then.
	if ok, err := other.Delete(ctx(t), "ttl/delete"); err != nil || ok {
		t.Fatalf("Delete of an expired key = %v, %v; want false: Delete ignores expiry", ok, err)
	}
	if ok, err := other.DeleteIfValue(ctx(t), "ttl/deleteifvalue", []byte("old")); err != nil || ok {
		t.Fatalf("DeleteIfValue of an expired key = %v, %v; want false: DeleteIfValue ignores expiry", ok, err)
	}
	for _, k := range []string{"keep/none", "keep/long", "keep/absent"} {
		kvMustGet(t, other, k, []byte("v"))
	}
	kvSet(t, kv, "ttl/list", []byte("again"), 0)
	kvMustGet(t, other, "ttl/list", []byte("again"))
}

// A store that keeps expired entries until swept says so by implementing
// ports.Expirer; sweeping removes what expired and nothing else.
func kvDeleteExpired(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	kv := open(t)
	sweeper, ok := kv.(ports.Expirer)
	if !ok {
		t.Skipf("%s: no ports.Expirer (expired keys are forgotten without a sweep)", adapterName(t))
	}
	kvSet(t, kv, "keep/none", []byte("v"), 0)
	kvSet(t, kv, "keep/long", []byte("v"), time.Hour)
	kvSet(t, kv, "gone/a", []byte("v"), kvShortTTL)
	kvSet(t, kv, "gone/b", []byte("v"), kvShortTTL)
	// The probe, written last, expires last: once it has, so have the two.
	// Reading it may drop it, as a store that purges on read does.
	kvSet(t, kv, "probe", []byte("v"), kvShortTTL)
	kvAwaitExpiry(t, kv, "probe", "Set")
	n, err := sweeper.DeleteExpired(ctx(t))
	if err != nil || n < 2 || n > 3 {
		t.Fatalf("DeleteExpired = %d, %v; want the 2 expired entries and perhaps the probe", n, err)
	}
	if n, err := sweeper.DeleteExpired(ctx(t)); err != nil || n != 0 {
		t.Fatalf("a second DeleteExpired = %d, %v; want 0", n, err)
	}
	kvMustGet(t, kv, "keep/none", []byte("v"))
	kvMustGet(t, kv, "keep/long", []byte("v"))
}

func kvSetWithoutTTLClearsTheTTL(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	kv := open(t)
	kvSet(t, kv, "k", []byte("short"), kvShortTTL)
	kvSet(t, kv, "k", []byte("forever"), 0)
	kvSet(t, kv, "marker", []byte("v"), kvShortTTL)
	kvAwaitExpiry(t, kv, "marker", "Set")
	kvMustGet(t, kv, "k", []byte("forever"))
}

func kvHandlesShareTheStore(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	a, b := open(t), open(t)
	kvSet(t, a, "k", []byte("from a"), 0)
	kvMustGet(t, b, "k", []byte("from a"))
	if ok, err := b.SetIfAbsent(ctx(t), "k", []byte("from b"), 0); err != nil || ok {
		t.Fatalf("SetIfAbsent on b over a's key = %v, %v; want false", ok, err)
	}
	if ok, err := b.Delete(ctx(t), "k"); err != nil || !ok {
		t.Fatalf("Delete on b = %v, %v; want true", ok, err)
	}
	kvMustBeMissing(t, a, "k")
}

// kvRace runs f kvRacers times at once, alternating between two handles, and
// returns which racers won.
func kvRace(t *testing.T, a, b ports.KeyValue, f func(kv ports.KeyValue, racer int) (bool, error)) []int {
	t.Helper()
	var wg sync.WaitGroup
	won := make([]bool, kvRacers)
	start := make(chan struct{})
	for i := range kvRacers {
		kv := a
		if i%2 == 1 {
			kv = b
		}
		wg.Go(func() {
			<-start
			ok, err := f(kv, i)
			if err != nil {
				t.Errorf("racer %d: %v", i, err)
			}
			won[i] = ok
		})
	}
	close(start)
	wg.Wait()
	var winners []int
	for i, ok := range won {
		if ok {
			winners = append(winners, i)
		}
	}
	return winners
}

func kvSetIfAbsentRace(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	a, b := open(t), open(t)
	for round := range kvRaceRounds {
		key := fmt.Sprintf("race/%d", round)
		winners := kvRace(t, a, b, func(kv ports.KeyValue, racer int) (bool, error) {
			return kv.SetIfAbsent(ctx(t), key, []byte(fmt.Sprint(racer)), 0)
		})
		if len(winners) != 1 {
			t.Fatalf("round %d: racers %v won SetIfAbsent, want exactly one", round, winners)
		}
		kvMustGet(t, a, key, []byte(fmt.Sprint(winners[0])))
	}
}

// SetIfAbsent over a key whose TTL has passed takes a path of its own in
// many stores (the expired value, or its marker, is still there): of the
// callers racing there, exactly one wins, as over a key never written. The
// raced keys are not read before the race, so a store that drops an
// expired key as it reads it meets the race on the expired value: a probe,
// written last, tells when they have all expired.
func kvSetIfAbsentRaceOverAnExpiredKey(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	a, b := open(t), open(t)
	for round := range kvRaceRounds {
		kvSet(t, a, fmt.Sprintf("expired/%d", round), []byte("stale"), kvShortTTL)
	}
	kvSet(t, a, "probe", []byte("v"), kvShortTTL)
	kvAwaitExpiry(t, b, "probe", "Set")
	for round := range kvRaceRounds {
		key := fmt.Sprintf("expired/%d", round)
		winners := kvRace(t, a, b, func(kv ports.KeyValue, racer int) (bool, error) {
			return kv.SetIfAbsent(ctx(t), key, []byte(fmt.Sprint(racer)), 0)
		})
		if len(winners) != 1 {
			t.Fatalf("round %d: racers %v won SetIfAbsent over an expired key, want exactly one", round, winners)
		}
		kvMustGet(t, b, key, []byte(fmt.Sprint(winners[0])))
	}
}

func kvDeleteIfValueRace(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	a, b := open(t), open(t)
	for round := range kvRaceRounds {
		kvSet(t, a, "k", []byte("v"), 0)
		winners := kvRace(t, a, b, func(kv ports.KeyValue, _ int) (bool, error) {
			return kv.DeleteIfValue(ctx(t), "k", []byte("v"))
		})
		if len(winners) != 1 {
			t.Fatalf("round %d: racers %v won DeleteIfValue, want exactly one", round, winners)
		}
		kvMustBeMissing(t, b, "k")
	}
}

// kvListKeysPagination surrounds the listed prefix with keys just outside it.
// It pages through kvPageCount keys by every size from one key to
// ports.MaxPage, one short of them all among them, so the last page holds
// a single key.
func kvListKeysPagination(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	kv, other := open(t), open(t)
	var want []string
	for i := range kvPageCount {
		k := fmt.Sprintf("p/%04d", (i*7919)%kvPageCount) // written out of order
		kvSet(t, kv, k, []byte("v"), 0)
		want = append(want, k)
	}
	slices.Sort(want)
	outside := []string{"p", "o/9999", "p.", "p0", "q/0000", "P/0001"}
	for _, k := range outside {
		kvSet(t, kv, k, []byte("v"), 0)
	}
	for _, limit := range []int{1, 37, 100, kvPageCount - 1, ports.MaxPage} {
		if got := kvAllKeys(t, other, "p/", limit); !slices.Equal(got, want) {
			t.Fatalf("ListKeys p/ by %d: %d keys (%s), want %d keys, each once in order",
				limit, len(got), kvSpan(got), len(want))
		}
	}
	if got := kvAllKeys(t, other, "", 111); len(got) != kvPageCount+len(outside) {
		t.Fatalf("ListKeys with no prefix: %d keys, want %d", len(got), kvPageCount+len(outside))
	}
	last := want[len(want)-10]
	keys, next, err := other.ListKeys(ctx(t), "p/", 10, last)
	if err != nil {
		t.Fatalf("ListKeys after %s: %v", last, err)
	}
	if want := want[len(want)-9:]; !slices.Equal(keys, want) || next != "" {
		t.Fatalf("ListKeys after %s = %q, %q; want %q and no cursor", last, keys, next, want)
	}
}

// kvPageCount is how many keys the pagination case writes under its
// prefix: enough for hundreds of pages of one key and several of each
// larger size, few enough that a store which reads its whole bucket for
// each page (as the JetStream one does) pages through them in seconds.
const kvPageCount = 500

func kvListKeysDefaultPageSize(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	kv := open(t)
	for i := range 150 {
		kvSet(t, kv, fmt.Sprintf("k%03d", i), []byte("v"), 0)
	}
	for _, limit := range []int{0, -1} {
		keys, next, err := kv.ListKeys(ctx(t), "", limit, "")
		if err != nil {
			t.Fatalf("ListKeys with limit %d: %v", limit, err)
		}
		if len(keys) != 100 || next == "" {
			t.Fatalf("ListKeys with limit %d: %d keys, next %q; want 100 and a cursor", limit, len(keys), next)
		}
	}
}

// A prefix is a plain string, not a LIKE or GLOB pattern.
func kvListKeysPrefixIsLiteral(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	kv := open(t)
	for _, k := range []string{"a%b", "axb", "a_c", "ayc", "a*d", "a[e]", "ae", "a\\f"} {
		kvSet(t, kv, k, []byte("v"), 0)
	}
	for prefix, want := range map[string][]string{
		"a%":  {"a%b"},
		"a_":  {"a_c"},
		"a*":  {"a*d"},
		"a[":  {"a[e]"},
		"a\\": {"a\\f"},
		"a":   {"a%b", "a*d", "a[e]", "a\\f", "a_c", "ae", "axb", "ayc"},
		"b":   nil,
	} {
		if got := kvAllKeys(t, kv, prefix, 0); !slices.Equal(got, want) {
			t.Errorf("ListKeys %q = %q, want %q", prefix, got, want)
		}
	}
}

// A page after which no live key follows is the last page and has no
// cursor, whatever deleted keys come after it: a caller stops at "" and
// must not be sent for a page that is always empty.
func kvListKeysLastPageHasNoCursor(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	kv := open(t)
	for _, k := range []string{"a", "b", "c", "d"} {
		kvSet(t, kv, k, []byte("v"), 0)
	}
	for _, k := range []string{"c", "d"} {
		if ok, err := kv.Delete(ctx(t), k); err != nil || !ok {
			t.Fatalf("Delete %q = %v, %v; want true", k, ok, err)
		}
	}
	keys, next, err := kv.ListKeys(ctx(t), "", 2, "")
	if err != nil {
		t.Fatalf("ListKeys: %v", err)
	}
	if !slices.Equal(keys, []string{"a", "b"}) || next != "" {
		t.Fatalf("ListKeys by 2 = %q, cursor %q; want [a b] and no cursor, since no live key follows", keys, next)
	}
}

// A cursor is a place in the order of keys, not a key that must still be
// there: a page continues after it when another caller has deleted the
// key it names since the page before, or when no key ever had its name.
// A store that looked the cursor's key up would list from the start again
// (a caller paging through would never end) or stop early.
func kvListKeysAfterACursorNoLongerStored(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	kv := open(t)
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		kvSet(t, kv, k, []byte("v"), 0)
	}
	keys, next, err := kv.ListKeys(ctx(t), "", 2, "")
	if err != nil || !slices.Equal(keys, []string{"a", "b"}) || next == "" {
		t.Fatalf("ListKeys by 2 = %q, cursor %q, %v; want [a b] and a cursor", keys, next, err)
	}
	if ok, err := kv.Delete(ctx(t), "b"); err != nil || !ok {
		t.Fatalf("Delete %q = %v, %v; want true", "b", ok, err)
	}
	for _, cursor := range []string{next, "b", "bb"} {
		keys, next, err := kv.ListKeys(ctx(t), "", 2, cursor)
		if err != nil || !slices.Equal(keys, []string{"c", "d"}) || next == "" {
			t.Errorf("ListKeys by 2 after cursor %q, whose key is not stored = %q, cursor %q, %v; want [c d] and a cursor", cursor, keys, next, err)
		}
	}
}

// kvSpan describes a list of keys by its ends, for a failure message.
func kvSpan(keys []string) string {
	switch len(keys) {
	case 0:
		return "none"
	case 1:
		return fmt.Sprintf("only %q", keys[0])
	}
	return fmt.Sprintf("from %q to %q", keys[0], keys[len(keys)-1])
}

func kvDurable(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	kv := open(t)
	kvSet(t, kv, "k", []byte("kept"), 0)
	closer, ok := kv.(io.Closer)
	if !ok {
		t.Fatalf("a durable adapter's handle %T has no Close", kv)
	}
	if err := closer.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	kvMustGet(t, open(t), "k", []byte("kept"))
}
