package contracttests

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/abi-engine/engine/ports"
)

// The cases of this file hold every adapter to the bounds of ports/limits.go
// and to the same refusals of input one backend cannot keep (NUL in JSON),
// so no deploy meets a new refusal when it changes adapters and no caller
// makes one call do unbounded work.

// nested is a JSON object nesting depth levels: {"a":{"a":...{"leaf":1}}}.
func nested(depth int) map[string]any {
	m := map[string]any{"leaf": 1.0}
	for range depth - 1 {
		m = map[string]any{"a": m}
	}
	return m
}

// nestedArray is a JSON array nesting depth levels: [[...[1]...]].
func nestedArray(depth int) any {
	var v any = []any{1.0}
	for range depth - 1 {
		v = []any{v}
	}
	return v
}

func wantInvalid(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, ports.ErrInvalidArgument) {
		t.Errorf("%s: err %v, want ErrInvalidArgument", what, err)
	}
}

// docDepthIsBounded: a document nesting MaxDepth levels is stored and its
// collection stays queryable with where and order_by; one level more is
// refused, in an object or an array.
func docDepthIsBounded(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "c")
	deepest := nested(ports.MaxDepth)
	deepest["n"] = 1.0
	docPut(t, s, "c", "deepest", deepest)
	docPut(t, s, "c", "flat", map[string]any{"n": 2.0})
	for name, data := range map[string]map[string]any{
		"an object": nested(ports.MaxDepth + 1),
		"an array":  {"a": nestedArray(ports.MaxDepth)},
	} {
		_, err := s.Put(ctx(t), "c", "deeper", data, ports.Cond{})
		wantInvalid(t, "Put "+name+" nesting one level past MaxDepth", err)
	}
	docMustBeMissing(t, s, "c", "deeper")
	found, _, err := s.Find(ctx(t), "c", ports.Query{Where: map[string]any{"n": 1.0}, OrderBy: "a"})
	if err != nil || len(found) != 1 || found[0].ID != "deepest" {
		t.Fatalf("Find where n=1 order by a = %v, %v; want the deepest document", docIDs(found), err)
	}
	if n, err := s.Count(ctx(t), "c", map[string]any{"n": 2.0}); err != nil || n != 1 {
		t.Fatalf("Count where n=2 = %d, %v; want 1", n, err)
	}
	_, _, err = s.Find(ctx(t), "c", ports.Query{Where: map[string]any{"a": nested(ports.MaxDepth + 1)}})
	wantInvalid(t, "Find where a value nests past MaxDepth", err)
}

// docNULIsRefused: NUL in a string or a field name of data or where is
// refused by every adapter, since PostgreSQL's jsonb cannot keep it.
func docNULIsRefused(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "c")
	docPut(t, s, "c", "d", map[string]any{"v": "kept"})
	for name, data := range map[string]map[string]any{
		"a string":        {"v": "a\x00b"},
		"a nested string": {"o": map[string]any{"l": []any{"x", "\x00"}}},
		"a field name":    {"a\x00": 1.0},
		"a nested field":  {"o": map[string]any{"\x00": 1.0}},
		"only NUL":        {"v": "\x00"},
	} {
		_, err := s.Put(ctx(t), "c", "d", data, ports.Cond{})
		wantInvalid(t, "Put with NUL in "+name, err)
	}
	docSameData(t, "after refused Puts", docMustGet(t, s, "c", "d").Data, map[string]any{"v": "kept"})
	_, _, err := s.Find(ctx(t), "c", ports.Query{Where: map[string]any{"v": "kept\x00"}})
	wantInvalid(t, "Find where a string holds NUL", err)
	_, err = s.Count(ctx(t), "c", map[string]any{"v": []any{"\x00"}})
	wantInvalid(t, "Count where a string holds NUL", err)
}

// docTextIsUTF8: a string or a field name of data or where that is not
// UTF-8, at any depth and in any Go type JSON takes (a map[string]string,
// a []string), is refused, and the stored document stays as it was. JSON
// cannot carry such text: encoding/json writes each byte outside UTF-8 as
// U+FFFD, so a store taking it would keep text the caller never gave, and
// a Find for the caller's own text would miss it. The character U+FFFD
// itself, given as UTF-8, is text like any other and is kept.
func docTextIsUTF8(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "c")
	docPut(t, s, "c", "d", map[string]any{"v": "kept"})
	for name, data := range map[string]map[string]any{
		"a string":              {"v": "a\xffb"},
		"a nested string":       {"o": map[string]any{"l": []any{"x", "\xed\xa0\x80"}}},
		"a field name":          {"a\xff": 1.0},
		"a nested field name":   {"o": map[string]any{"\xc3(": 1.0}},
		"a map[string]string":   {"o": map[string]string{"k": "\xfe"}},
		"a []string":            {"l": []string{"ok", "\x80"}},
		"a string cut short":    {"v": "caf\xc3"},
		"a string after U+FFFD": {"v": "\ufffd\xff"},
	} {
		_, err := s.Put(ctx(t), "c", "d", data, ports.Cond{})
		wantInvalid(t, "Put with text not UTF-8 in "+name, err)
	}
	docSameData(t, "after refused Puts", docMustGet(t, s, "c", "d").Data, map[string]any{"v": "kept"})
	_, _, err := s.Find(ctx(t), "c", ports.Query{Where: map[string]any{"v": "kept\xff"}})
	wantInvalid(t, "Find where a string is not UTF-8", err)
	_, err = s.Count(ctx(t), "c", map[string]any{"v": map[string]any{"\xff": "x"}})
	wantInvalid(t, "Count where a nested field name is not UTF-8", err)
	docPut(t, s, "c", "e", map[string]any{"v": "\ufffd", "o": map[string]any{"\ufffd": []any{"\ufffd"}}})
	docSameData(t, "a document holding U+FFFD", docMustGet(t, s, "c", "e").Data, map[string]any{"v": "\ufffd", "o": map[string]any{"\ufffd": []any{"\ufffd"}}})
	if n, err := s.Count(ctx(t), "c", map[string]any{"v": "\ufffd"}); err != nil || n != 1 {
		t.Fatalf("Count where v is U+FFFD = %d, %v; want 1", n, err)
	}
}

// docFindLimitIsBounded: MaxPage is a page; more, up to the largest int,
// is refused rather than overflowing into no limit at all.
func docFindLimitIsBounded(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docSample(t, s)
	if found, _, err := s.Find(ctx(t), "c", ports.Query{Limit: ports.MaxPage}); err != nil || len(found) != 7 {
		t.Fatalf("Find limit MaxPage = %d documents, %v; want 7", len(found), err)
	}
	for _, limit := range []int{ports.MaxPage + 1, math.MaxInt32, math.MaxInt} {
		_, _, err := s.Find(ctx(t), "c", ports.Query{Limit: limit})
		wantInvalid(t, "Find with a limit past MaxPage", err)
	}
}

// docWhereIsBounded: a where naming MaxWhere fields is a query like any
// other, in Find and in Count; one more field is refused before it reaches
// the backend. Past the bound the backends part ways: SQLite fails the
// query at a few hundred fields, PostgreSQL runs it for ever longer (half
// a minute at 20,000) and fails it past 32,767, so without the bound one
// caller holds a store's connection for as long as it likes, and a query
// one deploy answers another fails as the engine's own error.
func docWhereIsBounded(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "c")
	where := func(n int) map[string]any {
		w := map[string]any{}
		for i := range n {
			w[fmt.Sprintf("f%d", i)] = float64(i)
		}
		return w
	}
	docPut(t, s, "c", "wide", where(ports.MaxWhere+1))
	docPut(t, s, "c", "other", map[string]any{"f0": 1.0})
	if found, _, err := s.Find(ctx(t), "c", ports.Query{Where: where(ports.MaxWhere)}); err != nil || len(found) != 1 || found[0].ID != "wide" {
		t.Fatalf("Find where %d fields = %v, %v; want the document that has them", ports.MaxWhere, docIDs(found), err)
	}
	if n, err := s.Count(ctx(t), "c", where(ports.MaxWhere)); err != nil || n != 1 {
		t.Fatalf("Count where %d fields = %d, %v; want 1", ports.MaxWhere, n, err)
	}
	_, _, err := s.Find(ctx(t), "c", ports.Query{Where: where(ports.MaxWhere + 1)})
	wantInvalid(t, "Find where one field past MaxWhere", err)
	_, err = s.Count(ctx(t), "c", where(ports.MaxWhere+1))
	wantInvalid(t, "Count where one field past MaxWhere", err)
}

// ttlStore is what keyvalue and the cache share: writes with a TTL.
type ttlStore interface {
	Get(ctx context.Context, key string) ([]byte, error)
	Set(ctx context.Context, key string, value []byte, ttl time.Duration) error
	SetIfAbsent(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error)
}

// ttlIsBounded: a TTL that would round to zero ("never expires") and one
// past MaxTTL are refused by both writes, which then wrote nothing; the
// bounds themselves are taken.
func ttlIsBounded(t *testing.T, s ttlStore) {
	for _, ttl := range []time.Duration{time.Nanosecond, ports.MinTTL - 1, ports.MaxTTL + time.Second, math.MaxInt64} {
		wantInvalid(t, "Set with TTL "+ttl.String(), s.Set(ctx(t), "k", []byte("v"), ttl))
		_, err := s.SetIfAbsent(ctx(t), "k", []byte("v"), ttl)
		wantInvalid(t, "SetIfAbsent with TTL "+ttl.String(), err)
	}
	if v, err := s.Get(ctx(t), "k"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("after the refused writes Get = %q, %v; want ErrNotFound", v, err)
	}
	for _, ttl := range []time.Duration{ports.MaxTTL, ports.MinTTL} {
		if err := s.Set(ctx(t), "bound", []byte("v"), ttl); err != nil {
			t.Fatalf("Set with TTL %v: %v", ttl, err)
		}
	}
}

// ttlBelowASecondExpires: a TTL is kept to the millisecond, so a value
// written with one below a second expires, through Set and SetIfAbsent
// alike. A store that keeps TTLs in whole seconds (Redis's EX, an integer
// column of seconds) rounds such a TTL down to 0, which means "never
// expires": a lock taken with SetIfAbsent for 500 ms would be held for
// ever. other reads, so a handle that remembers its own writes cannot
// hide it.
func ttlBelowASecondExpires(t *testing.T, s, other ttlStore) {
	const ttl = 500 * time.Millisecond
	if err := s.Set(ctx(t), "set", []byte("v"), ttl); err != nil {
		t.Fatalf("Set with TTL %v: %v", ttl, err)
	}
	if ok, err := s.SetIfAbsent(ctx(t), "setifabsent", []byte("v"), ports.MinTTL); err != nil || !ok {
		t.Fatalf("SetIfAbsent with TTL %v = %v, %v; want true", ports.MinTTL, ok, err)
	}
	for _, w := range []struct {
		key, writer string
		ttl         time.Duration
	}{{"set", "Set", ttl}, {"setifabsent", "SetIfAbsent", ports.MinTTL}} {
		deadline := time.Now().Add(callTimeout)
		for {
			_, err := other.Get(ctx(t), w.key)
			if errors.Is(err, ports.ErrNotFound) {
				break
			}
			if err != nil {
				t.Fatalf("Get %q: %v", w.key, err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s %q with a TTL of %v: Get still returns it after %v; %s dropped a TTL below a second (kept in whole seconds, it rounds to 0, never expires)",
					w.writer, w.key, w.ttl, callTimeout, w.writer)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func kvTTLBelowASecondExpires(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	ttlBelowASecondExpires(t, open(t), open(t))
}

func cacheTTLBelowASecondExpires(t *testing.T, open func(t *testing.T) ports.Cache) {
	ttlBelowASecondExpires(t, open(t), open(t))
}

func kvTTLIsBounded(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	ttlIsBounded(t, open(t))
}

func cacheTTLIsBounded(t *testing.T, open func(t *testing.T) ports.Cache) {
	ttlIsBounded(t, open(t))
}

// kvListKeysLimitIsBounded: ListKeys takes MaxPage and refuses more.
func kvListKeysLimitIsBounded(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	kv := open(t)
	kvSet(t, kv, "k", []byte("v"), 0)
	if keys, _, err := kv.ListKeys(ctx(t), "", ports.MaxPage, ""); err != nil || len(keys) != 1 {
		t.Fatalf("ListKeys limit MaxPage = %q, %v; want [k]", keys, err)
	}
	for _, limit := range []int{ports.MaxPage + 1, math.MaxInt} {
		_, _, err := kv.ListKeys(ctx(t), "", limit, "")
		wantInvalid(t, "ListKeys with a limit past MaxPage", err)
	}
}

// kvListKeysRefusesInvalidPrefixesAndCursors: a prefix or cursor is empty
// or a valid key (storecheck.Prefix), in every adapter alike, as a key is.
// A cursor taken as some other string would list from the wrong place.
func kvListKeysRefusesInvalidPrefixesAndCursors(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	kv := open(t)
	kvSet(t, kv, "k", []byte("v"), 0)
	for _, bad := range []string{"bad\xffutf8", "nul\x00", strings.Repeat("k", 1025)} {
		if keys, _, err := kv.ListKeys(ctx(t), bad, 0, ""); !errors.Is(err, ports.ErrInvalidArgument) {
			t.Errorf("ListKeys with prefix %.20q: %q, err %v, want ErrInvalidArgument", bad, keys, err)
		}
		if keys, _, err := kv.ListKeys(ctx(t), "", 0, bad); !errors.Is(err, ports.ErrInvalidArgument) {
			t.Errorf("ListKeys after cursor %.20q: %q, err %v, want ErrInvalidArgument", bad, keys, err)
		}
	}
}

// objListLimitIsBounded: List takes MaxPage and refuses more.
func objListLimitIsBounded(t *testing.T, open func(t *testing.T) ports.ObjectStorage, _ ObjectStorageCapabilities) {
	s := open(t)
	objPut(t, s, "k", "v", ports.PutObjectOptions{})
	if infos, _, err := s.List(ctx(t), "", ports.MaxPage, ""); err != nil || len(infos) != 1 {
		t.Fatalf("List limit MaxPage = %d objects, %v; want 1", len(infos), err)
	}
	for _, limit := range []int{ports.MaxPage + 1, math.MaxInt} {
		_, _, err := s.List(ctx(t), "", limit, "")
		wantInvalid(t, "List with a limit past MaxPage", err)
	}
}

// objListRefusesInvalidPrefixesAndCursors: a prefix or cursor is empty or
// a valid key (storecheck.Prefix), in every adapter alike, as a key is.
func objListRefusesInvalidPrefixesAndCursors(t *testing.T, open func(t *testing.T) ports.ObjectStorage, _ ObjectStorageCapabilities) {
	s := open(t)
	objPut(t, s, "k", "v", ports.PutObjectOptions{})
	for _, bad := range []string{"bad\xffutf8", "nul\x00", strings.Repeat("k", 1025)} {
		if infos, _, err := s.List(ctx(t), bad, 0, ""); !errors.Is(err, ports.ErrInvalidArgument) {
			t.Errorf("List with prefix %.20q: %d objects, err %v, want ErrInvalidArgument", bad, len(infos), err)
		}
		if infos, _, err := s.List(ctx(t), "", 0, bad); !errors.Is(err, ports.ErrInvalidArgument) {
			t.Errorf("List after cursor %.20q: %d objects, err %v, want ErrInvalidArgument", bad, len(infos), err)
		}
	}
}

// vsInputIsBounded: dimension, k and payloads are held to the port's
// bounds, and NUL or text that is not UTF-8 in a payload or a filter is
// refused as in a document.
func vsInputIsBounded(t *testing.T, open func(t *testing.T) ports.VectorStore, _ VectorStoreCapabilities) {
	s := open(t)
	wantInvalid(t, "CreateCollection past MaxDimension", s.CreateCollection(ctx(t), "huge", ports.MaxDimension+1, ports.MetricDot))
	vsCreate(t, s, "v", 2, ports.MetricDot)
	for name, payload := range map[string]map[string]any{
		"NUL in a string":       {"k": "a\x00"},
		"NUL in a field name":   {"\x00": 1.0},
		"a string not UTF-8":    {"k": "a\xff"},
		"a name not UTF-8":      {"o": map[string]any{"\xff": 1.0}},
		"nesting past MaxDepth": nested(ports.MaxDepth + 1),
	} {
		err := s.Upsert(ctx(t), "v", []ports.Vector{{ID: "a", Values: []float32{1, 0}, Payload: payload}})
		wantInvalid(t, "Upsert a payload with "+name, err)
	}
	if n := vsCount(t, s, "v"); n != 0 {
		t.Fatalf("refused upserts left %d vectors", n)
	}
	vsUpsert(t, s, "v", ports.Vector{ID: "a", Values: []float32{1, 0}, Payload: map[string]any{"k": strings.Repeat("x", 3)}})
	if got, err := s.Search(ctx(t), "v", []float32{1, 0}, ports.MaxK, nil); err != nil || len(got) != 1 {
		t.Fatalf("Search k MaxK = %d results, %v; want 1", len(got), err)
	}
	for _, k := range []int{ports.MaxK + 1, math.MaxInt} {
		_, err := s.Search(ctx(t), "v", []float32{1, 0}, k, nil)
		wantInvalid(t, "Search with k past MaxK", err)
	}
	_, err := s.Search(ctx(t), "v", []float32{1, 0}, 1, map[string]any{"k": "\x00"})
	wantInvalid(t, "Search with NUL in the filter", err)
	_, err = s.Search(ctx(t), "v", []float32{1, 0}, 1, map[string]any{"k": "x\xff"})
	wantInvalid(t, "Search with a filter string not UTF-8", err)
}
