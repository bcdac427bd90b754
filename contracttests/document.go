package contracttests

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/abi-engine/engine/ports"
)

// DocumentCapabilities are what an adapter offers beyond the core contract.
type DocumentCapabilities struct {
	// Durable: the data outlives every handle. Handles then implement
	// io.Closer, and closing one twice is harmless.
	Durable bool
	// Fenced: engines may share the store, so it keeps the newest fencing
	// token a write brought (ports.FencingToken) and refuses every write
	// of an older term with ports.ErrFenced, changing nothing (ADR 0002
	// lists the stores that cannot yet).
	Fenced bool
}

// docCount is how many documents the pagination cases write: enough for
// dozens of pages of each size, few enough that a store which reads a
// whole collection for each page (as the JetStream one does) pages through
// them in seconds. 7919, with which the case spreads their ids, is prime
// to it.
const docCount = 500

// RunDocument holds a document adapter to the ports.DocumentStore
// contract. Documents come back as a JSON reader sees them: numbers are
// float64 whatever type was put.
func RunDocument(t *testing.T, h Harness[ports.DocumentStore], caps DocumentCapabilities) {
	cases := []struct {
		name string
		run  func(t *testing.T, open func(t *testing.T) ports.DocumentStore)
	}{
		{"EmptyStore", docEmptyStore},
		{"EnsureCollectionTwice", docEnsureCollectionTwice},
		{"CollectionsAreListedByName", docCollectionsAreListedByName},
		{"DropCollection", docDropCollection},
		{"MissingCollectionIsNotFound", docMissingCollectionIsNotFound},
		{"InvalidCollectionName", docInvalidCollectionName},
		{"CollectionsAreSeparate", docCollectionsAreSeparate},
		{"PutThenGet", docPutThenGet},
		{"DataIsCopied", docDataIsCopied},
		{"VersionGrowsOnEveryPut", docVersionGrowsOnEveryPut},
		{"VersionsAreNeverGivenAgain", docVersionsAreNeverGivenAgain},
		{"GetMissingIsNotFound", docGetMissingIsNotFound},
		{"Delete", docDelete},
		{"PutIfVersion", docPutIfVersion},
		{"DeleteIfVersion", docDeleteIfVersion},
		{"OddIDs", docOddIDs},
		{"InvalidIDs", docInvalidIDs},
		{"InvalidData", docInvalidData},
		{"HandlesShareTheStore", docHandlesShareTheStore},
		{"PutIfVersionRace", docPutIfVersionRace},
		{"CreateRace", docCreateRace},
		{"ConditionalWritesAreLinearizable", docConditionalWritesAreLinearizable},
		{"FindWhere", docFindWhere},
		{"FindWhereNegativeZero", docFindWhereNegativeZero},
		{"ANegativeZeroComesBackAsZero", docANegativeZeroComesBackAsZero},
		{"FindOrderBy", docFindOrderBy},
		{"FindOrderAcrossTypes", docFindOrderAcrossTypes},
		{"FindOrderLargeNumbers", docFindOrderLargeNumbers},
		{"IntegersPastTwoToThe53AreTheNumbersStored", docIntegersPastTwoToThe53AreTheNumbersStored},
		{"FindOrderStrings", docFindOrderStrings},
		{"FindOrdersArraysThenObjectsByID", docFindOrdersArraysThenObjectsByID},
		{"FindWhereComposite", docFindWhereComposite},
		{"OddFieldNames", docOddFieldNames},
		{"FindPagination", docFindPagination},
		{"PagingWhileOthersWrite", docPagingWhileOthersWrite},
		{"FindBadCursor", docFindBadCursor},
		{"FindForgedCursor", docFindForgedCursor},
		{"FindInvalidField", docFindInvalidField},
		{"DepthIsBounded", docDepthIsBounded},
		{"NULIsRefused", docNULIsRefused},
		{"TextThatIsNotUTF8IsRefused", docTextIsUTF8},
		{"FindLimitIsBounded", docFindLimitIsBounded},
		{"WhereIsBounded", docWhereIsBounded},
		{"Count", docCountCase},
		{"AFindOrCountDuringADropIsWholeOrNotFound", docAFindOrCountDuringADropIsWholeOrNotFound},
		{"Durable", func(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
			if !caps.Durable {
				t.Skipf("%s: no durability", adapterName(t))
			}
			docDurable(t, open)
		}},
		{"AnOlderTermIsFenced", func(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
			if !caps.Fenced {
				t.Skipf("%s: not fenced", adapterName(t))
			}
			docFencing(t, open)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newStore(t, h))
		})
	}
}

func docEnsure(t *testing.T, s ports.DocumentStore, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := s.EnsureCollection(ctx(t), n); err != nil {
			t.Fatalf("EnsureCollection %q: %v", n, err)
		}
	}
}

func docPut(t *testing.T, s ports.DocumentStore, coll, id string, data map[string]any) ports.Document {
	t.Helper()
	d, err := s.Put(ctx(t), coll, id, data, ports.Cond{})
	if err != nil {
		t.Fatalf("Put %s/%q: %v", coll, id, err)
	}
	if d.ID != id || d.Version == 0 {
		t.Fatalf("Put %s/%q returned id %q version %d", coll, id, d.ID, d.Version)
	}
	return d
}

func docMustGet(t *testing.T, s ports.DocumentStore, coll, id string) ports.Document {
	t.Helper()
	d, err := s.Get(ctx(t), coll, id)
	if err != nil {
		t.Fatalf("Get %s/%q: %v", coll, id, err)
	}
	if d.ID != id {
		t.Fatalf("Get %s/%q returned id %q", coll, id, d.ID)
	}
	return d
}

func docMustBeMissing(t *testing.T, s ports.DocumentStore, coll, id string) {
	t.Helper()
	if d, err := s.Get(ctx(t), coll, id); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Get %s/%q = %+v, %v; want ErrNotFound", coll, id, d, err)
	}
}

func docCollections(t *testing.T, s ports.DocumentStore) []string {
	t.Helper()
	names, err := s.Collections(ctx(t))
	if err != nil {
		t.Fatalf("Collections: %v", err)
	}
	return names
}

func docSameData(t *testing.T, what string, got, want map[string]any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: data %#v, want %#v", what, got, want)
	}
}

func docEmptyStore(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	if names := docCollections(t, s); len(names) != 0 {
		t.Fatalf("Collections on an empty store = %q", names)
	}
	docEnsure(t, s, "c")
	docs, next, err := s.Find(ctx(t), "c", ports.Query{})
	if err != nil || len(docs) != 0 || next != "" {
		t.Fatalf("Find in an empty collection = %v, %q, %v; want nothing", docs, next, err)
	}
	if n, err := s.Count(ctx(t), "c", nil); err != nil || n != 0 {
		t.Fatalf("Count of an empty collection = %d, %v; want 0", n, err)
	}
	docMustBeMissing(t, s, "c", "d")
}

func docEnsureCollectionTwice(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s, other := open(t), open(t)
	docEnsure(t, s, "c")
	docPut(t, s, "c", "d", map[string]any{"k": "v"})
	docEnsure(t, other, "c")
	docEnsure(t, s, "c")
	if names := docCollections(t, s); !slices.Equal(names, []string{"c"}) {
		t.Fatalf("Collections = %q, want [c]", names)
	}
	docMustGet(t, other, "c", "d")
}

func docCollectionsAreListedByName(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	names := []string{"zeta", "Alpha", "alpha", "a-b", "a_b", "0", strings.Repeat("x", 64)}
	docEnsure(t, s, names...)
	want := slices.Clone(names)
	slices.Sort(want)
	if got := docCollections(t, s); !slices.Equal(got, want) {
		t.Fatalf("Collections = %q, want %q", got, want)
	}
}

func docDropCollection(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "c", "keep")
	docPut(t, s, "c", "d", map[string]any{"k": "v"})
	docPut(t, s, "keep", "d", map[string]any{"k": "kept"})
	if err := s.DropCollection(ctx(t), "c"); err != nil {
		t.Fatalf("DropCollection: %v", err)
	}
	if got := docCollections(t, s); !slices.Equal(got, []string{"keep"}) {
		t.Fatalf("Collections after a drop = %q, want [keep]", got)
	}
	docMustBeMissing(t, s, "c", "d")
	if err := s.DropCollection(ctx(t), "c"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("second DropCollection: err %v, want ErrNotFound", err)
	}
	docEnsure(t, s, "c")
	if n, err := s.Count(ctx(t), "c", nil); err != nil || n != 0 {
		t.Fatalf("Count of a recreated collection = %d, %v; want 0: the drop kept documents", n, err)
	}
	docSameData(t, "the other collection", docMustGet(t, s, "keep", "d").Data, map[string]any{"k": "kept"})
}

func docMissingCollectionIsNotFound(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "other")
	calls := map[string]error{}
	_, calls["Put"] = s.Put(ctx(t), "missing", "d", map[string]any{}, ports.Cond{})
	_, calls["PutIfVersion0"] = s.Put(ctx(t), "missing", "d", map[string]any{}, ports.IfVersion(0))
	_, calls["PutIfVersion1"] = s.Put(ctx(t), "missing", "d", map[string]any{}, ports.IfVersion(1))
	_, calls["Get"] = s.Get(ctx(t), "missing", "d")
	calls["Delete"] = s.Delete(ctx(t), "missing", "d", ports.Cond{})
	_, _, calls["Find"] = s.Find(ctx(t), "missing", ports.Query{})
	_, calls["Count"] = s.Count(ctx(t), "missing", nil)
	calls["DropCollection"] = s.DropCollection(ctx(t), "missing")
	for name, err := range calls {
		if !errors.Is(err, ports.ErrNotFound) {
			t.Errorf("%s on a missing collection: err %v, want ErrNotFound", name, err)
		}
	}
	if got := docCollections(t, s); !slices.Equal(got, []string{"other"}) {
		t.Fatalf("Collections = %q: a call on a missing collection created it", got)
	}
}

func docInvalidCollectionName(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	for _, name := range []string{"", "a/b", "../x", "with space", "é", "a.b", strings.Repeat("x", 65)} {
		calls := map[string]error{}
		calls["EnsureCollection"] = s.EnsureCollection(ctx(t), name)
		calls["DropCollection"] = s.DropCollection(ctx(t), name)
		_, calls["Put"] = s.Put(ctx(t), name, "d", map[string]any{}, ports.Cond{})
		_, calls["Get"] = s.Get(ctx(t), name, "d")
		calls["Delete"] = s.Delete(ctx(t), name, "d", ports.Cond{})
		_, _, calls["Find"] = s.Find(ctx(t), name, ports.Query{})
		_, calls["Count"] = s.Count(ctx(t), name, nil)
		for call, err := range calls {
			if !errors.Is(err, ports.ErrInvalidArgument) {
				t.Errorf("%s with collection %.20q: err %v, want ErrInvalidArgument", call, name, err)
			}
		}
	}
	if got := docCollections(t, s); len(got) != 0 {
		t.Fatalf("refused names created collections %q", got)
	}
}

func docCollectionsAreSeparate(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "a", "b")
	docPut(t, s, "a", "d", map[string]any{"in": "a"})
	docMustBeMissing(t, s, "b", "d")
	docPut(t, s, "b", "d", map[string]any{"in": "b"})
	docSameData(t, "a/d", docMustGet(t, s, "a", "d").Data, map[string]any{"in": "a"})
	if n, err := s.Count(ctx(t), "b", nil); err != nil || n != 1 {
		t.Fatalf("Count b = %d, %v; want 1", n, err)
	}
}

// docChange changes a document's data as a caller might after a call: a
// field, a nested object's field and a list's element, and adds a field.
// It changes only what has the shape it knows, whatever a store returned.
func docChange(data map[string]any) {
	if data == nil {
		return
	}
	data["s"] = "changed"
	data["added"] = true
	if obj, ok := data["obj"].(map[string]any); ok {
		obj["n"] = "changed"
	}
	if list, ok := data["list"].([]any); ok && len(list) > 0 {
		list[0] = "changed"
	}
}

// A store keeps a copy of a document of its own: the map a caller put,
// changed after Put, and the maps a Put, Get or Find returned, changed by
// their reader, leave the stored document as it was. A store that kept
// the caller's map, or handed out its own, would let a caller change a
// document without a write (no version, no fence), and race with every
// other caller that holds the map.
func docDataIsCopied(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "c")
	data := func() map[string]any {
		return map[string]any{"s": "kept", "obj": map[string]any{"n": "kept"}, "list": []any{"kept"}}
	}
	given := data()
	put := docPut(t, s, "c", "d", given)
	docChange(given)
	docSameData(t, "Get after the caller changed the map it put", docMustGet(t, s, "c", "d").Data, data())
	docChange(put.Data)
	docSameData(t, "Get after the caller changed the data Put returned", docMustGet(t, s, "c", "d").Data, data())
	docChange(docMustGet(t, s, "c", "d").Data)
	docSameData(t, "Get after the caller changed the data a Get returned", docMustGet(t, s, "c", "d").Data, data())
	for _, d := range docFindAll(t, s, "c", ports.Query{}) {
		docChange(d.Data)
	}
	docSameData(t, "Get after the caller changed the data Find returned", docMustGet(t, s, "c", "d").Data, data())
}

func docPutThenGet(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "c")
	data := map[string]any{
		"s":       "text with \"quotes\", <html> & unicode é🙂",
		"int":     42,
		"float":   2.5,
		"neg":     -1e-7,
		"big":     1e21,
		"t":       true,
		"f":       false,
		"null":    nil,
		"list":    []any{1, "two", false, nil, []any{}},
		"obj":     map[string]any{"nested": map[string]any{"deep": "yes"}},
		"":        "empty field name",
		"a.b":     "dotted",
		"id":      "not the document id",
		"version": 99,
	}
	want := map[string]any{
		"s":       "text with \"quotes\", <html> & unicode é🙂",
		"int":     float64(42),
		"float":   2.5,
		"neg":     -1e-7,
		"big":     1e21,
		"t":       true,
		"f":       false,
		"null":    nil,
		"list":    []any{float64(1), "two", false, nil, []any{}},
		"obj":     map[string]any{"nested": map[string]any{"deep": "yes"}},
		"":        "empty field name",
		"a.b":     "dotted",
		"id":      "not the document id",
		"version": float64(99),
	}
	put := docPut(t, s, "c", "d", data)
	docSameData(t, "Put's document", put.Data, want)
	got := docMustGet(t, s, "c", "d")
	docSameData(t, "Get", got.Data, want)
	if got.Version != put.Version {
		t.Fatalf("Get version %d, Put returned %d", got.Version, put.Version)
	}
	got.Data["s"] = "changed by the caller"
	docSameData(t, "Get after the caller changed a result", docMustGet(t, s, "c", "d").Data, want)

	empty := docPut(t, s, "c", "empty", nil)
	if len(empty.Data) != 0 {
		t.Fatalf("Put with nil data returned %#v", empty.Data)
	}
	if d := docMustGet(t, s, "c", "empty"); d.Data == nil || len(d.Data) != 0 {
		t.Fatalf("Get of a document put with nil data = %#v, want an empty object", d.Data)
	}
}

func docVersionGrowsOnEveryPut(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "c")
	var last uint64
	for i := range 5 {
		d := docPut(t, s, "c", "d", map[string]any{"i": i})
		if d.Version <= last {
			t.Fatalf("Put %d gave version %d after %d", i, d.Version, last)
		}
		last = d.Version
		if g := docMustGet(t, s, "c", "d"); g.Version != last {
			t.Fatalf("Get version %d after Put gave %d", g.Version, last)
		}
	}
	docPut(t, s, "c", "other", nil)
	docPut(t, s, "c", "other", nil)
	if g := docMustGet(t, s, "c", "d"); g.Version != last {
		t.Fatalf("writes to another document moved this one's version from %d to %d", last, g.Version)
	}
}

// A version names one state of a document for good: a document deleted
// and made again, or one in a collection dropped and made again, starts
// above every version it had, so a writer still holding an old one is
// refused instead of overwriting the new document.
func docVersionsAreNeverGivenAgain(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "c")
	var held []uint64
	put := func(cond ports.Cond) {
		t.Helper()
		d, err := s.Put(ctx(t), "c", "d", map[string]any{"n": len(held)}, cond)
		if err != nil {
			t.Fatalf("Put %d: %v", len(held), err)
		}
		for _, v := range held {
			if d.Version <= v {
				t.Fatalf("Put %d gave version %d, not above %d, a version the document had before", len(held), d.Version, v)
			}
		}
		held = append(held, d.Version)
	}
	stale := func(when string) {
		t.Helper()
		for _, v := range held[:len(held)-1] {
			if _, err := s.Put(ctx(t), "c", "d", map[string]any{"stale": v}, ports.IfVersion(v)); !errors.Is(err, ports.ErrConflict) {
				t.Fatalf("%s: Put IfVersion(%d), an old version: err %v, want ErrConflict", when, v, err)
			}
			if err := s.Delete(ctx(t), "c", "d", ports.IfVersion(v)); !errors.Is(err, ports.ErrConflict) {
				t.Fatalf("%s: Delete IfVersion(%d), an old version: err %v, want ErrConflict", when, v, err)
			}
		}
	}
	put(ports.Cond{})
	put(ports.Cond{})
	if err := s.Delete(ctx(t), "c", "d", ports.Cond{}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	put(ports.IfVersion(0))
	stale("after a delete")
	if err := s.DropCollection(ctx(t), "c"); err != nil {
		t.Fatalf("DropCollection: %v", err)
	}
	docEnsure(t, s, "c")
	put(ports.IfVersion(0))
	stale("after the collection was dropped and made again")
	if d := docMustGet(t, s, "c", "d"); d.Version != held[len(held)-1] || d.Data["n"] != float64(len(held)-1) {
		t.Fatalf("after the refused writes Get = %+v; want version %d and n %d", d, held[len(held)-1], len(held)-1)
	}
}

func docGetMissingIsNotFound(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "c")
	docPut(t, s, "c", "d", nil)
	docMustBeMissing(t, s, "c", "D")
	docMustBeMissing(t, s, "c", "d2")
}

func docDelete(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "c")
	docPut(t, s, "c", "d", nil)
	docPut(t, s, "c", "keep", nil)
	if err := s.Delete(ctx(t), "c", "d", ports.Cond{}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	docMustBeMissing(t, s, "c", "d")
	if err := s.Delete(ctx(t), "c", "d", ports.Cond{}); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("second Delete: err %v, want ErrNotFound", err)
	}
	docMustGet(t, s, "c", "keep")
	if d, err := s.Put(ctx(t), "c", "d", nil, ports.IfVersion(0)); err != nil {
		t.Fatalf("Put IfVersion(0) after a delete = %+v, %v; want a new document", d, err)
	}
}

func docPutIfVersion(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "c")
	first, err := s.Put(ctx(t), "c", "d", map[string]any{"v": "first"}, ports.IfVersion(0))
	if err != nil {
		t.Fatalf("Put IfVersion(0) on a new document: %v", err)
	}
	if _, err := s.Put(ctx(t), "c", "d", map[string]any{"v": "again"}, ports.IfVersion(0)); !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("Put IfVersion(0) on an existing document: err %v, want ErrConflict", err)
	}
	second, err := s.Put(ctx(t), "c", "d", map[string]any{"v": "second"}, ports.IfVersion(first.Version))
	if err != nil {
		t.Fatalf("Put at the current version: %v", err)
	}
	if second.Version <= first.Version {
		t.Fatalf("conditional Put gave version %d after %d", second.Version, first.Version)
	}
	if _, err := s.Put(ctx(t), "c", "d", map[string]any{"v": "stale"}, ports.IfVersion(first.Version)); !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("Put at a stale version: err %v, want ErrConflict", err)
	}
	if _, err := s.Put(ctx(t), "c", "d", map[string]any{"v": "future"}, ports.IfVersion(second.Version+1)); !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("Put at a future version: err %v, want ErrConflict", err)
	}
	got := docMustGet(t, s, "c", "d")
	if got.Version != second.Version {
		t.Fatalf("version %d after refused Puts, want %d", got.Version, second.Version)
	}
	docSameData(t, "after refused Puts", got.Data, map[string]any{"v": "second"})
	if _, err := s.Put(ctx(t), "c", "missing", nil, ports.IfVersion(1)); !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("Put IfVersion(1) on a missing document: err %v, want ErrConflict", err)
	}
	docMustBeMissing(t, s, "c", "missing")
}

func docDeleteIfVersion(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "c")
	old := docPut(t, s, "c", "d", nil)
	cur := docPut(t, s, "c", "d", nil)
	for _, v := range []uint64{0, old.Version, cur.Version + 1} {
		if err := s.Delete(ctx(t), "c", "d", ports.IfVersion(v)); !errors.Is(err, ports.ErrConflict) {
			t.Fatalf("Delete IfVersion(%d) at version %d: err %v, want ErrConflict", v, cur.Version, err)
		}
	}
	docMustGet(t, s, "c", "d")
	if err := s.Delete(ctx(t), "c", "d", ports.IfVersion(cur.Version)); err != nil {
		t.Fatalf("Delete at the current version: %v", err)
	}
	docMustBeMissing(t, s, "c", "d")
	if err := s.Delete(ctx(t), "c", "d", ports.IfVersion(cur.Version)); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Delete IfVersion of a missing document: err %v, want ErrNotFound", err)
	}
}

func docOddIDs(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s, other := open(t), open(t)
	docEnsure(t, s, "c")
	ids := kvOddKeyList()
	for i, id := range ids {
		docPut(t, s, "c", id, map[string]any{"i": i})
	}
	for i, id := range ids {
		docSameData(t, fmt.Sprintf("Get %.20q", id), docMustGet(t, other, "c", id).Data, map[string]any{"i": float64(i)})
	}
	want := slices.Clone(ids)
	slices.Sort(want)
	if got := docIDs(docFindAll(t, other, "c", ports.Query{Limit: 4})); !slices.Equal(got, want) {
		t.Fatalf("Find by id = %q, want %q", got, want)
	}
	for _, id := range ids {
		if err := other.Delete(ctx(t), "c", id, ports.Cond{}); err != nil {
			t.Fatalf("Delete %.20q: %v", id, err)
		}
	}
	if n, err := s.Count(ctx(t), "c", nil); err != nil || n != 0 {
		t.Fatalf("Count after deleting every document = %d, %v", n, err)
	}
}

func docInvalidIDs(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "c")
	for _, id := range []string{"", strings.Repeat("k", 1025), "bad\xffutf8"} {
		calls := map[string]error{}
		_, calls["Put"] = s.Put(ctx(t), "c", id, nil, ports.Cond{})
		_, calls["Get"] = s.Get(ctx(t), "c", id)
		calls["Delete"] = s.Delete(ctx(t), "c", id, ports.Cond{})
		for name, err := range calls {
			if !errors.Is(err, ports.ErrInvalidArgument) {
				t.Errorf("%s with id %.20q (%d bytes): err %v, want ErrInvalidArgument", name, id, len(id), err)
			}
		}
	}
	if n, err := s.Count(ctx(t), "c", nil); err != nil || n != 0 {
		t.Fatalf("refused Puts stored %d documents (%v)", n, err)
	}
}

func docInvalidData(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "c")
	docPut(t, s, "c", "d", map[string]any{"v": "kept"})
	for name, data := range map[string]map[string]any{
		"NaN":      {"v": math.NaN()},
		"infinity": {"v": math.Inf(1)},
		"channel":  {"v": make(chan int)},
	} {
		if _, err := s.Put(ctx(t), "c", "d", data, ports.Cond{}); !errors.Is(err, ports.ErrInvalidArgument) {
			t.Errorf("Put with %s: err %v, want ErrInvalidArgument", name, err)
		}
	}
	docSameData(t, "after refused Puts", docMustGet(t, s, "c", "d").Data, map[string]any{"v": "kept"})
}

func docHandlesShareTheStore(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	a, b := open(t), open(t)
	docEnsure(t, a, "c")
	if got := docCollections(t, b); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("Collections on b = %q, want [c]", got)
	}
	d := docPut(t, a, "c", "d", map[string]any{"from": "a"})
	if got := docMustGet(t, b, "c", "d"); got.Version != d.Version {
		t.Fatalf("b reads version %d, a wrote %d", got.Version, d.Version)
	}
	if err := b.Delete(ctx(t), "c", "d", ports.IfVersion(d.Version)); err != nil {
		t.Fatalf("Delete on b: %v", err)
	}
	docMustBeMissing(t, a, "c", "d")
}

// docRace runs f kvRacers times at once, alternating between two handles,
// and returns which racers won. Losers must fail with ErrConflict.
func docRace(t *testing.T, a, b ports.DocumentStore, f func(s ports.DocumentStore, racer int) error) []int {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, kvRacers)
	start := make(chan struct{})
	for i := range kvRacers {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			<-start
			errs[i] = f(s, i)
		})
	}
	close(start)
	wg.Wait()
	var winners []int
	for i, err := range errs {
		switch {
		case err == nil:
			winners = append(winners, i)
		case !errors.Is(err, ports.ErrConflict):
			t.Errorf("racer %d: err %v, want nil or ErrConflict", i, err)
		}
	}
	return winners
}

func docPutIfVersionRace(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	a, b := open(t), open(t)
	docEnsure(t, a, "c")
	cur := docPut(t, a, "c", "d", map[string]any{"racer": -1})
	for round := range kvRaceRounds {
		winners := docRace(t, a, b, func(s ports.DocumentStore, racer int) error {
			_, err := s.Put(ctx(t), "c", "d", map[string]any{"racer": racer}, ports.IfVersion(cur.Version))
			return err
		})
		if len(winners) != 1 {
			t.Fatalf("round %d: racers %v won Put at version %d, want exactly one", round, winners, cur.Version)
		}
		next := docMustGet(t, b, "c", "d")
		if next.Version <= cur.Version {
			t.Fatalf("round %d: version %d after a win at %d", round, next.Version, cur.Version)
		}
		docSameData(t, fmt.Sprintf("round %d", round), next.Data, map[string]any{"racer": float64(winners[0])})
		cur = next
	}
}

func docCreateRace(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	a, b := open(t), open(t)
	docEnsure(t, a, "c")
	for round := range kvRaceRounds {
		id := fmt.Sprintf("d%d", round)
		winners := docRace(t, a, b, func(s ports.DocumentStore, racer int) error {
			_, err := s.Put(ctx(t), "c", id, map[string]any{"racer": racer}, ports.IfVersion(0))
			return err
		})
		if len(winners) != 1 {
			t.Fatalf("round %d: racers %v created %q, want exactly one", round, winners, id)
		}
		docSameData(t, fmt.Sprintf("round %d", round), docMustGet(t, b, "c", id).Data, map[string]any{"racer": float64(winners[0])})
	}
}

// docFindAll pages through Find and fails on a document seen twice.
func docFindAll(t *testing.T, s ports.DocumentStore, coll string, q ports.Query) []ports.Document {
	t.Helper()
	var all []ports.Document
	seen := map[string]bool{}
	for page := 0; ; page++ {
		if page > 10_000 {
			t.Fatalf("Find %+v: more than 10000 pages, the cursor does not advance", q)
		}
		docs, next, err := s.Find(ctx(t), coll, q)
		if err != nil {
			t.Fatalf("Find %+v: %v", q, err)
		}
		limit := q.Limit
		if limit <= 0 {
			limit = 100
		}
		if len(docs) > limit {
			t.Fatalf("Find %+v: %d documents on a page of %d", q, len(docs), limit)
		}
		for _, d := range docs {
			if seen[d.ID] {
				t.Fatalf("Find %+v: %q on two pages", q, d.ID)
			}
			seen[d.ID] = true
			all = append(all, d)
		}
		if next == "" {
			return all
		}
		if len(docs) == 0 {
			t.Fatalf("Find %+v: an empty page with next cursor %q", q, next)
		}
		q.Cursor = next
	}
}

func docIDs(docs []ports.Document) []string {
	ids := make([]string, len(docs))
	for i, d := range docs {
		ids[i] = d.ID
	}
	return ids
}

// docSample is a small collection with fields of every scalar type.
func docSample(t *testing.T, s ports.DocumentStore) {
	t.Helper()
	docEnsure(t, s, "c")
	for id, data := range map[string]map[string]any{
		"a": {"kind": "fruit", "n": 3, "ok": true, "name": "apple", "tags": []any{"red"}},
		"b": {"kind": "fruit", "n": 1.5, "ok": false, "name": "banana"},
		"c": {"kind": "veg", "n": 3.0, "ok": true, "name": "carrot", "tags": []any{"red"}},
		"d": {"kind": "veg", "n": -2, "ok": false, "name": "Daikon", "opt": nil},
		"e": {"kind": "fruit", "n": 3, "ok": true, "name": "elder", "nested": map[string]any{"x": 1}},
		"f": {"kind": "3", "n": "3", "ok": "true", "name": "fig"},
		"g": {"kind": "fruit", "n": 1, "ok": 1, "name": "grape"},
	} {
		docPut(t, s, "c", id, data)
	}
}

func docFindWhere(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docSample(t, s)
	for _, c := range []struct {
		where map[string]any
		want  []string
	}{
		{nil, []string{"a", "b", "c", "d", "e", "f", "g"}},
		{map[string]any{"kind": "fruit"}, []string{"a", "b", "e", "g"}},
		{map[string]any{"kind": "veg", "ok": true}, []string{"c"}},
		{map[string]any{"n": 3}, []string{"a", "c", "e"}},
		{map[string]any{"n": 3.0}, []string{"a", "c", "e"}},
		{map[string]any{"n": int64(-2)}, []string{"d"}},
		{map[string]any{"n": 1.5}, []string{"b"}},
		{map[string]any{"n": "3"}, []string{"f"}},
		{map[string]any{"ok": true}, []string{"a", "c", "e"}},
		{map[string]any{"ok": false}, []string{"b", "d"}},
		{map[string]any{"ok": 1}, []string{"g"}},
		{map[string]any{"ok": "true"}, []string{"f"}},
		{map[string]any{"opt": nil}, []string{"d"}},
		{map[string]any{"tags": []any{"red"}}, []string{"a", "c"}},
		{map[string]any{"nested": map[string]any{"x": 1}}, []string{"e"}},
		{map[string]any{"name": "daikon"}, nil},
		{map[string]any{"missing": "x"}, nil},
		{map[string]any{"kind": "fruit", "n": 3, "ok": true}, []string{"a", "e"}},
	} {
		docs := docFindAll(t, s, "c", ports.Query{Where: c.where})
		if got := docIDs(docs); !slices.Equal(got, c.want) {
			t.Errorf("Find where %v = %q, want %q", c.where, got, c.want)
		}
		if n, err := s.Count(ctx(t), "c", c.where); err != nil || n != len(c.want) {
			t.Errorf("Count where %v = %d, %v; want %d", c.where, n, err, len(c.want))
		}
	}
	docs := docFindAll(t, s, "c", ports.Query{Where: map[string]any{"name": "banana"}})
	if len(docs) != 1 || docs[0].Version == 0 {
		t.Fatalf("Find banana = %+v", docs)
	}
	docSameData(t, "Find's document", docs[0].Data, map[string]any{"kind": "fruit", "n": 1.5, "ok": false, "name": "banana"})
}

// -0 and 0 are the same number wherever they stand: in a field, or inside
// an array or object. A store that compares composites by their text must
// not tell them apart.
func docFindWhereNegativeZero(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "c")
	negZero := math.Copysign(0, -1)
	docPut(t, s, "c", "neg", map[string]any{"n": negZero, "a": []any{negZero}, "o": map[string]any{"x": negZero}})
	docPut(t, s, "c", "pos", map[string]any{"n": 0, "a": []any{0}, "o": map[string]any{"x": 0}})
	for _, z := range []float64{0, negZero} {
		for _, where := range []map[string]any{{"n": z}, {"a": []any{z}}, {"o": map[string]any{"x": z}}} {
			if got := docIDs(docFindAll(t, s, "c", ports.Query{Where: where})); !slices.Equal(got, []string{"neg", "pos"}) {
				t.Errorf("Find where %v over a stored -0 and a stored 0 = %q, want both", where, got)
			}
		}
	}
}

// A -0 is stored as 0 at every depth, so Put, Get and Find give the same
// data on every adapter: PostgreSQL's jsonb has no -0 and gives back 0,
// where a store that kept a field's own -0 gave back -0.
func docANegativeZeroComesBackAsZero(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "c")
	negZero := math.Copysign(0, -1)
	const want = `{"a":[0],"n":0,"o":{"x":0}}`
	text := func(what string, data map[string]any) {
		t.Helper()
		raw, err := json.Marshal(data)
		if err != nil || string(raw) != want {
			t.Errorf("%s: data %s (%v), want %s", what, raw, err, want)
		}
	}
	d := docPut(t, s, "c", "neg", map[string]any{"n": negZero, "a": []any{negZero}, "o": map[string]any{"x": negZero}})
	text("Put's answer", d.Data)
	got, err := s.Get(ctx(t), "c", "neg")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	text("Get", got.Data)
	docs := docFindAll(t, s, "c", ports.Query{Where: map[string]any{"n": negZero}})
	if len(docs) != 1 {
		t.Fatalf("Find where n = -0 = %q, want [neg]", docIDs(docs))
	}
	text("Find", docs[0].Data)
}

func docFindOrderBy(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "c")
	for id, data := range map[string]map[string]any{
		"a": {"n": 3, "name": "pear"},
		"b": {"n": 1.5, "name": "Apple"},
		"c": {"n": 3, "name": "apple"},
		"d": {"n": -2, "name": "pear"},
		"e": {"n": 3, "name": "éclair"},
		"f": {"n": 10, "name": "zebra"},
	} {
		docPut(t, s, "c", id, data)
	}
	for _, c := range []struct {
		q    ports.Query
		want []string
	}{
		{ports.Query{}, []string{"a", "b", "c", "d", "e", "f"}},
		{ports.Query{Desc: true}, []string{"f", "e", "d", "c", "b", "a"}},
		{ports.Query{OrderBy: "n"}, []string{"d", "b", "a", "c", "e", "f"}},
		{ports.Query{OrderBy: "n", Desc: true}, []string{"f", "e", "c", "a", "b", "d"}},
		{ports.Query{OrderBy: "name"}, []string{"b", "c", "a", "d", "f", "e"}},
		{ports.Query{OrderBy: "name", Desc: true}, []string{"e", "f", "d", "a", "c", "b"}},
		{ports.Query{OrderBy: "n", Where: map[string]any{"name": "pear"}}, []string{"d", "a"}},
	} {
		for _, limit := range []int{0, 1, 2, 4} {
			c.q.Limit = limit
			if got := docIDs(docFindAll(t, s, "c", c.q)); !slices.Equal(got, c.want) {
				t.Errorf("Find %+v = %q, want %q", c.q, got, c.want)
			}
		}
	}
}

// Across types, Find orders a missing field and null first, then false,
// true, numbers and strings.
func docFindOrderAcrossTypes(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "c")
	for id, v := range map[string]any{
		"s1": "10", "s2": "a", "n1": -5, "n2": 100, "t": true, "f": false, "z": nil,
	} {
		docPut(t, s, "c", id, map[string]any{"v": v})
	}
	docPut(t, s, "c", "m", map[string]any{"other": 1})
	want := []string{"m", "z", "f", "t", "n1", "n2", "s1", "s2"}
	if got := docIDs(docFindAll(t, s, "c", ports.Query{OrderBy: "v", Limit: 3})); !slices.Equal(got, want) {
		t.Fatalf("Find by v = %q, want %q", got, want)
	}
	slices.Reverse(want)
	if got := docIDs(docFindAll(t, s, "c", ports.Query{OrderBy: "v", Desc: true, Limit: 3})); !slices.Equal(got, want) {
		t.Fatalf("Find by v desc = %q, want %q", got, want)
	}
}

// Numbers order by value and equal only themselves, whatever their
// magnitude: past 2^53 and 2^63, where an integer or text form would round
// or overflow, and a subnormal next to 0. Every page size gives one order.
func docFindOrderLargeNumbers(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "c")
	vals := map[string]float64{
		"a": -1e20, "b": -5, "c": 0.5, "d": 5, "e": 9.2e18, "f": 1e19, "g": 1e20, "h": 5e20, "i": 1e21, "j": 1e300,
		"k": math.Pow(2, 63), "l": -math.Pow(2, 63), "m": 1e-320,
	}
	ids := make([]string, 0, len(vals))
	for id, v := range vals {
		docPut(t, s, "c", id, map[string]any{"v": v})
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int { return cmp.Compare(vals[a], vals[b]) })
	for _, limit := range []int{0, 1, 3} {
		if got := docIDs(docFindAll(t, s, "c", ports.Query{OrderBy: "v", Limit: limit})); !slices.Equal(got, ids) {
			t.Errorf("Find by v, limit %d = %q, want %q", limit, got, ids)
		}
	}
	for id, v := range vals {
		if n, err := s.Count(ctx(t), "c", map[string]any{"v": v}); err != nil || n != 1 {
			t.Errorf("Count where v = %v (%s) = %d, %v; want 1", v, id, n, err)
		}
	}
}

// A number between 2^53 and 2^63 is written in JSON as an integer whose
// shortest digits end in zeros (2116178168839186432 as
// 2116178168839186400), which a store reading it as a 64-bit integer holds
// as another number than the float stored. Each still equals itself in
// where, and pages by it list each document once, in order, both ways.
func docIntegersPastTwoToThe53AreTheNumbersStored(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "c")
	var vals []float64
	for _, v := range []float64{2116178168839186432, 1.998297821575163e17, 8.928265225234293e18} {
		vals = append(vals, v, math.Nextafter(v, 0), math.Nextafter(v, math.Inf(1)), -v)
	}
	ids := make([]string, 0, 2*len(vals))
	for i, v := range vals {
		for _, suffix := range []string{"a", "b"} { // two documents per value, so the id breaks a tie
			id := fmt.Sprintf("%02d%s", i, suffix)
			docPut(t, s, "c", id, map[string]any{"v": v})
			ids = append(ids, id)
		}
	}
	for i, v := range vals {
		if n, err := s.Count(ctx(t), "c", map[string]any{"v": v}); err != nil || n != 2 {
			t.Errorf("Count where v = %v (document %02d) = %d, %v; want 2", v, i, n, err)
		}
	}
	valueOf := func(id string) float64 {
		i, _ := strconv.Atoi(id[:2])
		return vals[i]
	}
	slices.SortFunc(ids, func(a, b string) int { return cmp.Or(cmp.Compare(valueOf(a), valueOf(b)), strings.Compare(a, b)) })
	for _, limit := range []int{0, 1, 3} {
		if got := docIDs(docFindAll(t, s, "c", ports.Query{OrderBy: "v", Limit: limit})); !slices.Equal(got, ids) {
			t.Errorf("Find by v, limit %d = %q, want %q", limit, got, ids)
		}
	}
	desc := slices.Clone(ids)
	slices.Reverse(desc)
	for _, limit := range []int{1, 3} {
		if got := docIDs(docFindAll(t, s, "c", ports.Query{OrderBy: "v", Desc: true, Limit: limit})); !slices.Equal(got, desc) {
			t.Errorf("Find by v desc, limit %d = %q, want %q", limit, got, desc)
		}
	}
}

// Strings order by their bytes, as protocol.md says: not by a collation,
// and with control characters, characters past U+FFFF and the empty
// string in their byte places.
func docFindOrderStrings(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "c")
	vals := []string{"", "a", "a\u0001", "B", "é", "😀", "\uffff", "\u2028", "z", "a b", "<", "\t"}
	ids := make([]string, len(vals))
	for i, v := range vals {
		ids[i] = fmt.Sprintf("%02d", i)
		docPut(t, s, "c", ids[i], map[string]any{"v": v})
	}
	slices.SortFunc(ids, func(a, b string) int {
		ia, _ := strconv.Atoi(a)
		ib, _ := strconv.Atoi(b)
		return strings.Compare(vals[ia], vals[ib])
	})
	for _, limit := range []int{0, 1, 5} {
		if got := docIDs(docFindAll(t, s, "c", ports.Query{OrderBy: "v", Limit: limit})); !slices.Equal(got, ids) {
			t.Errorf("Find by string v, limit %d = %q, want %q", limit, got, ids)
		}
	}
}

// Arrays come after strings and objects after arrays, each in id order
// whatever they hold, on every page size and both ways: no two stores
// render a composite's text alike (key order, spaces, escapes, number
// forms), so an order by that text would differ between adapters.
func docFindOrdersArraysThenObjectsByID(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "c")
	for id, v := range map[string]any{
		"a1": []any{10}, "a2": []any{1, 2}, "a3": []any{}, "a4": []any{"<"}, "a5": []any{1e21}, "a6": []any{"é"},
		"o1": map[string]any{"b": 2, "aa": 1}, "o2": map[string]any{"ab": 0}, "o3": map[string]any{}, "o4": map[string]any{"a": "<"},
		"o5": map[string]any{"a": 1e21}, "o6": map[string]any{"a": []any{}}, "s": "z", "n": 1,
	} {
		docPut(t, s, "c", id, map[string]any{"v": v})
	}
	want := []string{"n", "s", "a1", "a2", "a3", "a4", "a5", "a6", "o1", "o2", "o3", "o4", "o5", "o6"}
	for _, limit := range []int{0, 1, 2, 5} {
		if got := docIDs(docFindAll(t, s, "c", ports.Query{OrderBy: "v", Limit: limit})); !slices.Equal(got, want) {
			t.Errorf("Find by v, limit %d = %q, want %q", limit, got, want)
		}
	}
	slices.Reverse(want)
	for _, limit := range []int{0, 1, 2, 5} {
		if got := docIDs(docFindAll(t, s, "c", ports.Query{OrderBy: "v", Desc: true, Limit: limit})); !slices.Equal(got, want) {
			t.Errorf("Find by v desc, limit %d = %q, want %q", limit, got, want)
		}
	}
}

// An array or object in where finds the documents holding an equal one,
// whatever characters JSON encoders escape in their own ways (HTML
// characters, U+2028, quotes, control characters) and in whatever order
// an object's keys were written; every page size lists each once.
func docFindWhereComposite(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "c")
	vals := []any{
		[]any{"<a&b>"},
		[]any{"é", "\u2028", "😀"},
		map[string]any{"b": 1, "a": []any{1.5, nil, true}},
		map[string]any{"long key": "x", "k": map[string]any{"z": 1, "aa": 2}},
		[]any{1e21, 1e20, 0, 1e-7},
		[]any{"tab\tnew\nline\"quote\\"},
	}
	want := make([]string, len(vals))
	for i, v := range vals {
		want[i] = fmt.Sprint(i)
		docPut(t, s, "c", want[i], map[string]any{"v": v})
	}
	for _, v := range vals {
		if n, err := s.Count(ctx(t), "c", map[string]any{"v": v}); err != nil || n != 1 {
			t.Errorf("Count where v = %#v = %d, %v; want 1", v, n, err)
		}
	}
	for _, limit := range []int{1, 2} {
		got := docIDs(docFindAll(t, s, "c", ports.Query{OrderBy: "v", Limit: limit}))
		if sorted := slices.Sorted(slices.Values(got)); !slices.Equal(sorted, want) {
			t.Errorf("Find by composite v, limit %d = %q, want each of %q once", limit, got, want)
		}
	}
}

// A top-level field is named by any string a JSON path or SQL would read
// as syntax (dots, brackets, quotes, "$", "*", blanks), and where and
// order by still mean that one field.
func docOddFieldNames(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "c")
	for _, f := range []string{"a.b", "a[0]", "$", "a b", "é", "*", "'", "a'b", "[", "]", ".", "$.x", "a\tb", "a]b"} {
		docPut(t, s, "c", "x", map[string]any{f: 1, "other": 2})
		docPut(t, s, "c", "y", map[string]any{f: 2, "other": 1})
		if n, err := s.Count(ctx(t), "c", map[string]any{f: 1}); err != nil || n != 1 {
			t.Errorf("Count where %q = 1: %d, %v; want 1", f, n, err)
		}
		docs, _, err := s.Find(ctx(t), "c", ports.Query{OrderBy: f, Desc: true})
		if err != nil || len(docs) != 2 || docs[0].ID != "y" {
			t.Errorf("Find order by %q desc = %q, %v; want [y x]", f, docIDs(docs), err)
		}
	}
}

func docFindPagination(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s, other := open(t), open(t)
	docEnsure(t, s, "c")
	type row struct {
		id    string
		group int
	}
	var rows []row
	for i := range docCount {
		id := fmt.Sprintf("doc-%04d", (i*7919)%docCount) // written out of order
		g := (i * 13) % 7
		docPut(t, s, "c", id, map[string]any{"group": g, "even": i%2 == 0, "i": i})
		rows = append(rows, row{id, g})
	}
	byID := slices.Clone(rows)
	slices.SortFunc(byID, func(a, b row) int { return strings.Compare(a.id, b.id) })
	byGroup := slices.Clone(rows)
	slices.SortFunc(byGroup, func(a, b row) int { return cmp.Or(cmp.Compare(a.group, b.group), strings.Compare(a.id, b.id)) })
	ids := func(rs []row) []string {
		out := make([]string, len(rs))
		for i, r := range rs {
			out[i] = r.id
		}
		return out
	}
	wantByID, wantByGroup := ids(byID), ids(byGroup)
	for _, limit := range []int{0, 33, docCount - 1, ports.MaxPage} {
		if got := docIDs(docFindAll(t, other, "c", ports.Query{Limit: limit})); !slices.Equal(got, wantByID) {
			t.Fatalf("Find by id, pages of %d: %d documents, not each once in order", limit, len(got))
		}
		if got := docIDs(docFindAll(t, other, "c", ports.Query{OrderBy: "group", Limit: limit})); !slices.Equal(got, wantByGroup) {
			t.Fatalf("Find by group, pages of %d: %d documents, not each once in order", limit, len(got))
		}
	}
	slices.Reverse(wantByGroup)
	if got := docIDs(docFindAll(t, other, "c", ports.Query{OrderBy: "group", Desc: true, Limit: 71})); !slices.Equal(got, wantByGroup) {
		t.Fatalf("Find by group descending: %d documents, not each once in order", len(got))
	}
	even := docFindAll(t, other, "c", ports.Query{Where: map[string]any{"even": true}, OrderBy: "i", Limit: 50})
	if len(even) != docCount/2 {
		t.Fatalf("Find even: %d documents, want %d", len(even), docCount/2)
	}
	for j, d := range even {
		if d.Data["i"] != float64(2*j) {
			t.Fatalf("Find even by i: document %d has i %v, want %d", j, d.Data["i"], 2*j)
		}
	}
	if n, err := other.Count(ctx(t), "c", nil); err != nil || n != docCount {
		t.Fatalf("Count = %d, %v; want %d", n, err, docCount)
	}
}

// docPagingWhileOthersWrite holds an adapter to the paging promise of
// docs/protocol.md while other callers insert, update and delete between
// the pages: every document present for the whole paging, matching where
// throughout, whose sort value does not change, comes exactly once and in
// its place, ties broken by id, in either direction; ordered by id, no
// document comes twice. Between every two pages the writers make a few
// writes more, so a cursor that counts places rather than naming one
// skips or repeats the documents it should keep.
func docPagingWhileOthersWrite(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s, other := open(t), open(t)
	docEnsure(t, s, "c")
	const (
		stableCount = 60
		churnCount  = 80
		limit       = 6
		gap         = 3 // writes at least, between two pages
	)
	// A stable document keeps its n (4 in 5 have one, with ties; the fifth
	// has none and sorts first) and its kind, while the writers rewrite
	// its other fields. Stable and churned ids interleave.
	stableData := func(i, w int) map[string]any {
		d := map[string]any{"kind": "a", "w": w}
		if i%5 != 4 {
			d["n"] = i % 5
		}
		return d
	}
	type stableDoc struct {
		id   string
		rank int // 0 without n, else n+1
	}
	var stable []stableDoc
	for i := range stableCount {
		id := fmt.Sprintf("%03d-s", i)
		docPut(t, s, "c", id, stableData(i, 0))
		rank := 0
		if i%5 != 4 {
			rank = i%5 + 1
		}
		stable = append(stable, stableDoc{id, rank})
	}
	for i := 0; i < churnCount; i += 2 {
		docPut(t, s, "c", fmt.Sprintf("%03d-c", i), map[string]any{"kind": "a", "n": i % 4})
	}

	var writes atomic.Int64
	wrote := make(chan struct{}, 1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for k := 1; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				c, cancel := context.WithTimeout(t.Context(), callTimeout)
				var err error
				switch op := rng.IntN(10); {
				case op < 2: // a stable document changes, but not its n or kind
					i := rng.IntN(stableCount)
					_, err = other.Put(c, "c", fmt.Sprintf("%03d-s", i), stableData(i, k), ports.Cond{})
				case op < 6: // a document is inserted, or moves, or stops or starts matching
					d := map[string]any{"kind": []string{"a", "b"}[rng.IntN(2)]}
					if n := rng.IntN(5); n < 4 {
						d["n"] = n
					}
					_, err = other.Put(c, "c", fmt.Sprintf("%03d-c", rng.IntN(churnCount)), d, ports.Cond{})
				default:
					err = other.Delete(c, "c", fmt.Sprintf("%03d-c", rng.IntN(churnCount)), ports.Cond{})
					if errors.Is(err, ports.ErrNotFound) {
						err = nil
					}
				}
				cancel()
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
				writes.Add(1)
				select {
				case wrote <- struct{}{}:
				default:
				}
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	// awaitWrites waits until the writers have made n writes more than
	// from; a writer that failed has said so, and ends the case.
	awaitWrites := func(from int64) {
		t.Helper()
		deadline := time.NewTimer(time.Minute)
		defer deadline.Stop()
		for writes.Load() < from+gap {
			select {
			case <-wrote:
			case <-deadline.C:
				t.Fatalf("the writers made %d writes in a minute, want %d", writes.Load()-from, gap)
			}
			if t.Failed() {
				t.FailNow()
			}
		}
	}

	for _, q := range []ports.Query{
		{Limit: limit},
		{OrderBy: "n", Limit: limit},
		{OrderBy: "n", Desc: true, Limit: limit},
		{Where: map[string]any{"kind": "a"}, OrderBy: "n", Limit: limit},
		{Where: map[string]any{"kind": "a"}, OrderBy: "n", Desc: true, Limit: limit},
		{Where: map[string]any{"kind": "a"}, Desc: true, Limit: limit},
	} {
		want := slices.Clone(stable)
		slices.SortFunc(want, func(a, b stableDoc) int {
			if q.OrderBy == "" {
				return strings.Compare(a.id, b.id)
			}
			return cmp.Or(cmp.Compare(a.rank, b.rank), strings.Compare(a.id, b.id))
		})
		if q.Desc {
			slices.Reverse(want)
		}
		isStable := map[string]bool{}
		for _, d := range stable {
			isStable[d.id] = true
		}
		var got []string // the stable documents, as they came
		times := map[string]int{}
		for page := 0; ; page++ {
			if page > 1000 {
				t.Fatalf("Find %+v while others write: more than 1000 pages, the cursor does not advance", q)
			}
			docs, next, err := s.Find(ctx(t), "c", q)
			if err != nil {
				t.Fatalf("Find %+v while others write, page %d: %v", q, page, err)
			}
			if len(docs) > limit {
				t.Fatalf("Find %+v while others write: %d documents on a page of %d", q, len(docs), limit)
			}
			for _, d := range docs {
				times[d.ID]++
				if isStable[d.ID] {
					got = append(got, d.ID)
				}
				if q.Where != nil && d.Data["kind"] != "a" {
					t.Fatalf("Find %+v while others write: %q has kind %v", q, d.ID, d.Data["kind"])
				}
			}
			if next == "" {
				break
			}
			awaitWrites(writes.Load())
			q.Cursor = next
		}
		q.Cursor = ""
		for _, d := range want {
			if times[d.id] != 1 {
				t.Fatalf("Find %+v while others write: %q, present throughout with its sort value unchanged, came %d times, want once", q, d.id, times[d.id])
			}
		}
		wantIDs := make([]string, len(want))
		for i, d := range want {
			wantIDs[i] = d.id
		}
		if !slices.Equal(got, wantIDs) {
			t.Fatalf("Find %+v while others write: the unchanged documents came in the order %q, want %q", q, got, wantIDs)
		}
		if q.OrderBy == "" {
			for id, n := range times {
				if n > 1 {
					t.Fatalf("Find %+v while others write: %q came %d times; ordered by id, none comes twice", q, id, n)
				}
			}
		}
	}
}

func docFindBadCursor(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docSample(t, s)
	_, next, err := s.Find(ctx(t), "c", ports.Query{OrderBy: "n", Limit: 2})
	if err != nil || next == "" {
		t.Fatalf("Find first page = %q, %v; want a cursor", next, err)
	}
	for name, q := range map[string]ports.Query{
		"garbage":         {Cursor: "%%% not a cursor"},
		"other order":     {OrderBy: "name", Limit: 2, Cursor: next},
		"other direction": {OrderBy: "n", Desc: true, Limit: 2, Cursor: next},
	} {
		if _, _, err := s.Find(ctx(t), "c", q); !errors.Is(err, ports.ErrInvalidArgument) {
			t.Errorf("Find with a cursor of %s: err %v, want ErrInvalidArgument", name, err)
		}
	}
}

// A cursor no page could have returned is refused alike by every adapter,
// never passed on to fail in the backend: a rank beyond any a key has, or
// beyond what a 32-bit column holds, and a NUL, which no stored string has.
func docFindForgedCursor(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docSample(t, s)
	for name, raw := range map[string]string{
		"rank past int32": `{"o":"n","d":false,"r":9999999999,"n":0,"s":"","id":"a"}`,
		"rank negative":   `{"o":"n","d":false,"r":-1,"n":0,"s":"","id":"a"}`,
		"NUL in str":      `{"o":"n","d":false,"r":3,"n":0,"s":"a\u0000b","id":"a"}`,
		"composite text":  `{"o":"n","d":false,"r":4,"n":0,"s":"[1]","id":"a"}`,
	} {
		q := ports.Query{OrderBy: "n", Cursor: base64.RawURLEncoding.EncodeToString([]byte(raw))}
		if _, _, err := s.Find(ctx(t), "c", q); !errors.Is(err, ports.ErrInvalidArgument) {
			t.Errorf("Find with a forged cursor (%s): err %v, want ErrInvalidArgument", name, err)
		}
	}
}

func docFindInvalidField(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docSample(t, s)
	for name, q := range map[string]ports.Query{
		"where with a quote":     {Where: map[string]any{`a"b`: 1}},
		"where with a backslash": {Where: map[string]any{`a\b`: 1}},
		"where with an empty":    {Where: map[string]any{"": 1}},
		"where with a NaN":       {Where: map[string]any{"n": math.NaN()}},
		"order by a backslash":   {OrderBy: `a\b`},
		"order by a quote":       {OrderBy: `"`},
		"order by invalid utf8":  {OrderBy: "\xff"},
	} {
		if _, _, err := s.Find(ctx(t), "c", q); !errors.Is(err, ports.ErrInvalidArgument) {
			t.Errorf("Find %s: err %v, want ErrInvalidArgument", name, err)
		}
	}
	if _, err := s.Count(ctx(t), "c", map[string]any{`a"b`: 1}); !errors.Is(err, ports.ErrInvalidArgument) {
		t.Errorf("Count where a quoted field: err %v, want ErrInvalidArgument", err)
	}
	// Such a field is refused in a query only: data holds it as any other.
	want := map[string]any{`a"b`: 1.0, `a\b`: 2.0}
	docPut(t, s, "c", "quoted", want)
	docSameData(t, "Get of a document whose fields hold a quote and a backslash", docMustGet(t, s, "c", "quoted").Data, want)
}

func docCountCase(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "c", "other")
	for i := range 25 {
		docPut(t, s, "c", fmt.Sprint(i), map[string]any{"odd": i%2 == 1})
	}
	docPut(t, s, "other", "x", map[string]any{"odd": true})
	for _, c := range []struct {
		where map[string]any
		want  int
	}{
		{nil, 25},
		{map[string]any{}, 25},
		{map[string]any{"odd": true}, 12},
		{map[string]any{"odd": false}, 13},
		{map[string]any{"odd": "true"}, 0},
		{map[string]any{"odd": true, "missing": nil}, 0},
	} {
		if n, err := s.Count(ctx(t), "c", c.where); err != nil || n != c.want {
			t.Errorf("Count where %v = %d, %v; want %d", c.where, n, err, c.want)
		}
	}
	if err := s.Delete(ctx(t), "c", "0", ports.Cond{}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if n, err := s.Count(ctx(t), "c", nil); err != nil || n != 24 {
		t.Fatalf("Count after a delete = %d, %v; want 24", n, err)
	}
}

func docDurable(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s := open(t)
	docEnsure(t, s, "c")
	d := docPut(t, s, "c", "d", map[string]any{"k": "kept"})
	closer, ok := s.(io.Closer)
	if !ok {
		t.Fatalf("a durable adapter's handle %T has no Close", s)
	}
	if err := closer.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	got := docMustGet(t, open(t), "c", "d")
	if got.Version != d.Version {
		t.Fatalf("version %d after reopening, want %d", got.Version, d.Version)
	}
	docSameData(t, "after reopening", got.Data, map[string]any{"k": "kept"})
}

// dropRounds is how many times the drop race is run: the window it looks
// for is narrow, and a store that has it meets it within a few hundred.
const dropRounds = 100

// A find or count that runs while another handle drops its collection
// answers with the whole collection, as it was before the drop, or that
// the collection is not found: never an empty or partial page, or a count
// short of the whole, of a collection that never was there so.
func docAFindOrCountDuringADropIsWholeOrNotFound(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	s, other := open(t), open(t)
	const docs = 3
	for round := range dropRounds {
		docEnsure(t, s, "c")
		for i := range docs {
			docPut(t, s, "c", fmt.Sprint(i), map[string]any{"n": i})
		}
		var (
			wg    sync.WaitGroup
			found []ports.Document
			n     int
			ferr  error
			cerr  error
		)
		wg.Go(func() { found, _, ferr = other.Find(ctx(t), "c", ports.Query{}) })
		wg.Go(func() { n, cerr = other.Count(ctx(t), "c", nil) })
		if err := s.DropCollection(ctx(t), "c"); err != nil {
			t.Fatalf("round %d: DropCollection: %v", round, err)
		}
		wg.Wait()
		if !errors.Is(ferr, ports.ErrNotFound) && (ferr != nil || len(found) != docs) {
			t.Fatalf("round %d: Find during a drop = %d documents, %v; want %d or ErrNotFound", round, len(found), ferr, docs)
		}
		if !errors.Is(cerr, ports.ErrNotFound) && (cerr != nil || n != docs) {
			t.Fatalf("round %d: Count during a drop = %d, %v; want %d or ErrNotFound", round, n, cerr, docs)
		}
	}
}
