package contracttests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/abi-engine/engine/ports"
)

// VectorStoreCapabilities are what an adapter offers beyond the core; the
// zero value is an exact store.
type VectorStoreCapabilities struct {
	// Approximate: search runs over an approximate index (HNSW and the
	// like), so the suite asks for a recall of at least vsMinRecall at k=10
	// instead of the exact ranking.
	Approximate bool
	// Fenced: as DocumentCapabilities.Fenced says, for vector writes.
	Fenced bool
}

const (
	// vsPoints is how many random points the brute-force checks index.
	vsPoints = 1000
	// vsDim is their dimension.
	vsDim = 24
	// vsQueries is how many random queries each brute-force check asks.
	vsQueries = 10
	// vsK is the k of the brute-force checks.
	vsK = 10
	// vsMinRecall is what an approximate adapter must reach at vsK.
	vsMinRecall = 0.9
	// vsTie is the relative score gap under which two points are a tie, so
	// an exact adapter may rank them either way.
	vsTie = 1e-9
	// vsScoreTolerance is how far an exact adapter's score may stray from
	// the float64 brute force (float32 inputs, other summation orders).
	vsScoreTolerance = 1e-4
)

// RunVectorStore holds a vector store adapter to the ports.VectorStore
// contract: collections, writes and reads, and search checked against an
// exact brute-force ranking.
func RunVectorStore(t *testing.T, h Harness[ports.VectorStore], caps VectorStoreCapabilities) {
	cases := []struct {
		name string
		run  func(t *testing.T, open func(t *testing.T) ports.VectorStore, caps VectorStoreCapabilities)
	}{
		{"EmptyStoreHasNoCollections", vsEmptyStoreHasNoCollections},
		{"CreateCollectionIsListed", vsCreateCollectionIsListed},
		{"CreateCollectionTwiceWithTheSameSettings", vsCreateCollectionTwiceWithTheSameSettings},
		{"CreateCollectionWithOtherSettingsConflicts", vsCreateCollectionWithOtherSettingsConflicts},
		{"CreateCollectionRejectsInvalidSettings", vsCreateCollectionRejectsInvalidSettings},
		{"DeleteCollectionRemovesItsVectors", vsDeleteCollectionRemovesItsVectors},
		{"MissingCollectionIsNotFound", vsMissingCollectionIsNotFound},
		{"UpsertThenGet", vsUpsertThenGet},
		{"VectorsAreCopied", vsVectorsAreCopied},
		{"CosineKeepsTheDirection", vsCosineKeepsTheDirection},
		{"UpsertReplacesTheVector", vsUpsertReplacesTheVector},
		{"GetMissingVectorIsNotFound", vsGetMissingVectorIsNotFound},
		{"DeleteIgnoresMissingIds", vsDeleteIgnoresMissingIds},
		{"WrongDimensionIsInvalidAndWritesNothing", vsWrongDimensionIsInvalidAndWritesNothing},
		{"InvalidInputIsRejected", vsInvalidInputIsRejected},
		{"IDsAreBounded", vsIDsAreBounded},
		{"InputIsBounded", vsInputIsBounded},
		{"SearchCosineMatchesBruteForce", vsSearchMatchesBruteForce(ports.MetricCosine)},
		{"SearchDotMatchesBruteForce", vsSearchMatchesBruteForce(ports.MetricDot)},
		{"SearchEuclidMatchesBruteForce", vsSearchMatchesBruteForce(ports.MetricEuclid)},
		{"SearchWithAFilterMatchesBruteForce", vsSearchWithAFilterMatchesBruteForce},
		{"SearchFilterMatchingNothing", vsSearchFilterMatchingNothing},
		{"SearchWithKLargerThanTheCollection", vsSearchWithKLargerThanTheCollection},
		{"SearchAnEmptyCollection", vsSearchAnEmptyCollection},
		{"SearchIsExactForLargeValues", vsSearchIsExactForLargeValues},
		{"SearchIsExactForTinyValues", vsSearchIsExactForTinyValues},
		{"TwoHandlesShareTheStore", vsTwoHandlesShareTheStore},
		{"ConcurrentUpsertsLoseNothing", vsConcurrentUpsertsLoseNothing},
		{"SearchSeesTheOtherHandlesWrites", vsSearchSeesTheOtherHandlesWrites},
		{"SearchFollowsGrowthReplacesAndShrinking", vsSearchFollowsGrowthReplacesAndShrinking},
		{"ANewHandleSearchesEverything", vsANewHandleSearchesEverything},
		{"AnOlderTermIsFenced", func(t *testing.T, open func(t *testing.T) ports.VectorStore, caps VectorStoreCapabilities) {
			if !caps.Fenced {
				t.Skipf("%s: not fenced", adapterName(t))
			}
			vsFencing(t, open)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newStore(t, h), caps)
		})
	}
}

func vsCreate(t *testing.T, s ports.VectorStore, name string, dim int, m ports.Metric) {
	t.Helper()
	if err := s.CreateCollection(ctx(t), name, dim, m); err != nil {
		t.Fatalf("CreateCollection(%q, %d, %s): %v", name, dim, m, err)
	}
}

func vsUpsert(t *testing.T, s ports.VectorStore, collection string, vs ...ports.Vector) {
	t.Helper()
	if err := s.Upsert(ctx(t), collection, vs); err != nil {
		t.Fatalf("Upsert %d vectors into %q: %v", len(vs), collection, err)
	}
}

func vsCount(t *testing.T, s ports.VectorStore, collection string) int {
	t.Helper()
	n, err := s.Count(ctx(t), collection)
	if err != nil {
		t.Fatalf("Count(%q): %v", collection, err)
	}
	return n
}

func vsSearch(t *testing.T, s ports.VectorStore, collection string, q []float32, k int, filter map[string]any) []ports.ScoredVector {
	t.Helper()
	got, err := s.Search(ctx(t), collection, q, k, filter)
	if err != nil {
		t.Fatalf("Search(%q, k=%d, filter %v): %v", collection, k, filter, err)
	}
	return got
}

// vsJSON gives a payload the shape it has after a JSON round trip (numbers
// become float64), which is what every adapter hands back.
func vsJSON(t *testing.T, p map[string]any) map[string]any {
	t.Helper()
	if len(p) == 0 {
		return nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatalf("payload %v: %v", p, err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("payload %s: %v", b, err)
	}
	return out
}

func vsSamePayload(t *testing.T, what string, got, want map[string]any) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if w := vsJSON(t, want); !reflect.DeepEqual(got, w) {
		t.Fatalf("%s: payload %#v, want %#v", what, got, w)
	}
}

// vsSameValues checks that a search result carries the vector it names,
// as the protocol's results do: the stored values, or on a cosine
// collection, which may keep its vectors normalised, their direction.
func vsSameValues(t *testing.T, m ports.Metric, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: Search gives %d values, want the vector's %d: Search leaves out the values", what, len(got), len(want))
	}
	if m == ports.MetricCosine {
		if c := vsScore(ports.MetricCosine, got, want); math.Abs(c-1) > 1e-6 {
			t.Fatalf("%s: Search gives values %v for %v: cosine %v, want the same direction", what, got, want, c)
		}
		return
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: Search gives values %v, want %v", what, got, want)
	}
}

func vsEmptyStoreHasNoCollections(t *testing.T, open func(t *testing.T) ports.VectorStore, _ VectorStoreCapabilities) {
	cs, err := open(t).Collections(ctx(t))
	if err != nil {
		t.Fatalf("Collections: %v", err)
	}
	if len(cs) != 0 {
		t.Fatalf("an empty store lists %v", cs)
	}
}

func vsCreateCollectionIsListed(t *testing.T, open func(t *testing.T) ports.VectorStore, _ VectorStoreCapabilities) {
	s := open(t)
	vsCreate(t, s, "b_docs", 8, ports.MetricDot)
	vsCreate(t, s, "a-notes", 3, ports.MetricCosine)
	vsCreate(t, s, "C9", 1536, ports.MetricEuclid)
	cs, err := s.Collections(ctx(t))
	if err != nil {
		t.Fatalf("Collections: %v", err)
	}
	want := []ports.VectorCollection{
		{Name: "C9", Dimension: 1536, Metric: ports.MetricEuclid},
		{Name: "a-notes", Dimension: 3, Metric: ports.MetricCosine},
		{Name: "b_docs", Dimension: 8, Metric: ports.MetricDot},
	}
	if !reflect.DeepEqual(cs, want) {
		t.Fatalf("Collections gives %+v, want %+v (sorted by name)", cs, want)
	}
	if n := vsCount(t, s, "b_docs"); n != 0 {
		t.Fatalf("a new collection counts %d vectors", n)
	}
}

func vsCreateCollectionTwiceWithTheSameSettings(t *testing.T, open func(t *testing.T) ports.VectorStore, _ VectorStoreCapabilities) {
	s := open(t)
	vsCreate(t, s, "docs", 4, ports.MetricCosine)
	vsUpsert(t, s, "docs", ports.Vector{ID: "a", Values: []float32{1, 2, 3, 4}})
	vsCreate(t, s, "docs", 4, ports.MetricCosine)
	if n := vsCount(t, s, "docs"); n != 1 {
		t.Fatalf("creating an existing collection again left %d vectors, want 1", n)
	}
}

func vsCreateCollectionWithOtherSettingsConflicts(t *testing.T, open func(t *testing.T) ports.VectorStore, _ VectorStoreCapabilities) {
	s := open(t)
	vsCreate(t, s, "docs", 4, ports.MetricCosine)
	for _, c := range []struct {
		dim    int
		metric ports.Metric
	}{{5, ports.MetricCosine}, {4, ports.MetricDot}, {4, ports.MetricEuclid}} {
		if err := s.CreateCollection(ctx(t), "docs", c.dim, c.metric); !errors.Is(err, ports.ErrConflict) {
			t.Fatalf("CreateCollection over (4, cosine) with (%d, %s): err %v, want ErrConflict", c.dim, c.metric, err)
		}
	}
	cs, err := s.Collections(ctx(t))
	if err != nil {
		t.Fatalf("Collections: %v", err)
	}
	want := []ports.VectorCollection{{Name: "docs", Dimension: 4, Metric: ports.MetricCosine}}
	if !reflect.DeepEqual(cs, want) {
		t.Fatalf("after refused creates, Collections gives %+v, want %+v", cs, want)
	}
}

func vsCreateCollectionRejectsInvalidSettings(t *testing.T, open func(t *testing.T) ports.VectorStore, _ VectorStoreCapabilities) {
	s := open(t)
	for _, c := range []struct {
		name   string
		dim    int
		metric ports.Metric
	}{
		{"", 4, ports.MetricCosine},
		{"a b", 4, ports.MetricCosine},
		{"../x", 4, ports.MetricCosine},
		{"a/b", 4, ports.MetricCosine},
		{"café", 4, ports.MetricCosine},
		{strings.Repeat("a", 65), 4, ports.MetricCosine},
		{"docs", 0, ports.MetricCosine},
		{"docs", -3, ports.MetricCosine},
		{"docs", 4, ""},
		{"docs", 4, "manhattan"},
	} {
		err := s.CreateCollection(ctx(t), c.name, c.dim, c.metric)
		if !errors.Is(err, ports.ErrInvalidArgument) {
			t.Fatalf("CreateCollection(%q, %d, %q): err %v, want ErrInvalidArgument", c.name, c.dim, c.metric, err)
		}
	}
	vsCreate(t, s, strings.Repeat("a", 64), 1, ports.MetricDot)
	cs, err := s.Collections(ctx(t))
	if err != nil {
		t.Fatalf("Collections: %v", err)
	}
	if len(cs) != 1 {
		t.Fatalf("refused creates left collections behind: %+v", cs)
	}
}

func vsDeleteCollectionRemovesItsVectors(t *testing.T, open func(t *testing.T) ports.VectorStore, _ VectorStoreCapabilities) {
	s := open(t)
	vsCreate(t, s, "docs", 2, ports.MetricEuclid)
	vsCreate(t, s, "keep", 2, ports.MetricEuclid)
	vsUpsert(t, s, "docs", ports.Vector{ID: "a", Values: []float32{1, 2}})
	vsUpsert(t, s, "keep", ports.Vector{ID: "a", Values: []float32{3, 4}})
	if err := s.DeleteCollection(ctx(t), "docs"); err != nil {
		t.Fatalf("DeleteCollection: %v", err)
	}
	if _, err := s.Get(ctx(t), "docs", "a"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Get from a deleted collection: err %v, want ErrNotFound", err)
	}
	if err := s.DeleteCollection(ctx(t), "docs"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("DeleteCollection twice: err %v, want ErrNotFound", err)
	}
	cs, err := s.Collections(ctx(t))
	if err != nil {
		t.Fatalf("Collections: %v", err)
	}
	if len(cs) != 1 || cs[0].Name != "keep" {
		t.Fatalf("after deleting docs, Collections gives %+v, want only keep", cs)
	}
	vsCreate(t, s, "docs", 3, ports.MetricDot)
	if n := vsCount(t, s, "docs"); n != 0 {
		t.Fatalf("a collection made again under a deleted one's name counts %d vectors", n)
	}
	if n := vsCount(t, s, "keep"); n != 1 {
		t.Fatalf("deleting docs changed keep: %d vectors, want 1", n)
	}
}

func vsMissingCollectionIsNotFound(t *testing.T, open func(t *testing.T) ports.VectorStore, _ VectorStoreCapabilities) {
	s := open(t)
	v := []ports.Vector{{ID: "a", Values: []float32{1, 2}}}
	calls := map[string]func() error{
		"DeleteCollection": func() error { return s.DeleteCollection(ctx(t), "nope") },
		"Upsert":           func() error { return s.Upsert(ctx(t), "nope", v) },
		"Search": func() error {
			_, err := s.Search(ctx(t), "nope", []float32{1, 2}, 3, nil)
			return err
		},
		"Get": func() error {
			_, err := s.Get(ctx(t), "nope", "a")
			return err
		},
		"Delete": func() error { return s.Delete(ctx(t), "nope", []string{"a"}) },
		"Count": func() error {
			_, err := s.Count(ctx(t), "nope")
			return err
		},
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, ports.ErrNotFound) {
			t.Errorf("%s on a missing collection: err %v, want ErrNotFound", name, err)
		}
	}
}

func vsUpsertThenGet(t *testing.T, open func(t *testing.T) ports.VectorStore, _ VectorStoreCapabilities) {
	s := open(t)
	vsCreate(t, s, "docs", 3, ports.MetricEuclid)
	want := []ports.Vector{
		{ID: "plain", Values: []float32{1.5, -2.25, 0}},
		{ID: "with payload", Values: []float32{0.1, 0.2, 0.3}, Payload: map[string]any{
			"title": "naïve café", "n": 42, "ratio": 0.5, "ok": true, "none": nil,
			"tags": []any{"a", "b"}, "meta": map[string]any{"lang": "fr", "pages": 3},
		}},
		{ID: "a/b/../ü 🙂", Values: []float32{-1e-6, 3.4e38, 1}},
	}
	vsUpsert(t, s, "docs", want...)
	for _, w := range want {
		got, err := s.Get(ctx(t), "docs", w.ID)
		if err != nil {
			t.Fatalf("Get(%q): %v", w.ID, err)
		}
		if got.ID != w.ID || !reflect.DeepEqual(got.Values, w.Values) {
			t.Fatalf("Get(%q) gives %q %v, want %v", w.ID, got.ID, got.Values, w.Values)
		}
		vsSamePayload(t, "Get("+strconv.Quote(w.ID)+")", got.Payload, w.Payload)
	}
	if n := vsCount(t, s, "docs"); n != len(want) {
		t.Fatalf("Count %d, want %d", n, len(want))
	}
}

// vsChange changes a vector as a caller might after a call: its first
// value, a payload field and a nested one, and adds a field. It changes
// only what has the shape it knows, whatever a store returned.
func vsChange(v ports.Vector) {
	if len(v.Values) > 0 {
		v.Values[0] = 99
	}
	if v.Payload == nil {
		return
	}
	v.Payload["s"] = "changed"
	v.Payload["added"] = true
	if obj, ok := v.Payload["obj"].(map[string]any); ok {
		obj["n"] = "changed"
	}
}

// A store keeps a copy of a vector of its own: the values and payload a
// caller upserted, changed after Upsert, and those a Get or Search
// returned, changed by their reader, leave the stored vector as it was. A
// store that kept the caller's slice or map, or handed out its own, would
// let a caller change a vector without a write, and race with every other
// caller that holds them.
func vsVectorsAreCopied(t *testing.T, open func(t *testing.T) ports.VectorStore, _ VectorStoreCapabilities) {
	s := open(t)
	vsCreate(t, s, "c", 2, ports.MetricEuclid)
	vector := func() ports.Vector {
		return ports.Vector{ID: "v", Values: []float32{1, 2}, Payload: map[string]any{"s": "kept", "obj": map[string]any{"n": "kept"}}}
	}
	same := func(what string) {
		t.Helper()
		want := vector()
		got, err := s.Get(ctx(t), "c", "v")
		if err != nil {
			t.Fatalf("Get %q: %v", "v", err)
		}
		if !slices.Equal(got.Values, want.Values) {
			t.Fatalf("%s: values %v, want %v", what, got.Values, want.Values)
		}
		vsSamePayload(t, what, got.Payload, want.Payload)
	}
	given := vector()
	vsUpsert(t, s, "c", given)
	vsChange(given)
	same("Get after the caller changed the vector it upserted")
	got, err := s.Get(ctx(t), "c", "v")
	if err != nil {
		t.Fatalf("Get %q: %v", "v", err)
	}
	vsChange(got)
	same("Get after the caller changed the vector a Get returned")
	for _, found := range vsSearch(t, s, "c", []float32{1, 2}, 1, nil) {
		vsChange(found.Vector)
	}
	same("Get after the caller changed the vector Search returned")
}

// A cosine collection may keep its vectors normalised (Qdrant does), so
// only the direction is part of the contract there.
func vsCosineKeepsTheDirection(t *testing.T, open func(t *testing.T) ports.VectorStore, _ VectorStoreCapabilities) {
	s := open(t)
	vsCreate(t, s, "docs", 3, ports.MetricCosine)
	in := []float32{3, -4, 12}
	vsUpsert(t, s, "docs", ports.Vector{ID: "a", Values: in, Payload: map[string]any{"k": "v"}})
	got, err := s.Get(ctx(t), "docs", "a")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if c := vsScore(ports.MetricCosine, got.Values, in); len(got.Values) != 3 || math.Abs(c-1) > 1e-6 {
		t.Fatalf("Get gives %v for %v: cosine %v, want the same direction", got.Values, in, c)
	}
	vsSamePayload(t, "Get", got.Payload, map[string]any{"k": "v"})
}

func vsUpsertReplacesTheVector(t *testing.T, open func(t *testing.T) ports.VectorStore, _ VectorStoreCapabilities) {
	s := open(t)
	vsCreate(t, s, "docs", 2, ports.MetricDot)
	vsUpsert(t, s, "docs", ports.Vector{ID: "a", Values: []float32{1, 0}, Payload: map[string]any{"v": 1, "old": true}})
	vsUpsert(t, s, "docs", ports.Vector{ID: "a", Values: []float32{0, 1}, Payload: map[string]any{"v": 2}})
	got, err := s.Get(ctx(t), "docs", "a")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if !reflect.DeepEqual(got.Values, []float32{0, 1}) {
		t.Fatalf("after a second Upsert, Get gives %v, want [0 1]", got.Values)
	}
	vsSamePayload(t, "Get after a second Upsert", got.Payload, map[string]any{"v": 2})
	if n := vsCount(t, s, "docs"); n != 1 {
		t.Fatalf("Count %d after replacing one vector, want 1", n)
	}
	res := vsSearch(t, s, "docs", []float32{0, 1}, 5, nil)
	if len(res) != 1 || res[0].ID != "a" || math.Abs(res[0].Score-1) > vsScoreTolerance {
		t.Fatalf("Search after a replace gives %+v, want a single a with score 1", res)
	}
}

func vsGetMissingVectorIsNotFound(t *testing.T, open func(t *testing.T) ports.VectorStore, _ VectorStoreCapabilities) {
	s := open(t)
	vsCreate(t, s, "docs", 2, ports.MetricDot)
	vsUpsert(t, s, "docs", ports.Vector{ID: "a", Values: []float32{1, 0}})
	if _, err := s.Get(ctx(t), "docs", "b"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Get of a missing id: err %v, want ErrNotFound", err)
	}
}

func vsDeleteIgnoresMissingIds(t *testing.T, open func(t *testing.T) ports.VectorStore, _ VectorStoreCapabilities) {
	s := open(t)
	vsCreate(t, s, "docs", 2, ports.MetricEuclid)
	vsUpsert(t, s, "docs",
		ports.Vector{ID: "a", Values: []float32{1, 0}},
		ports.Vector{ID: "b", Values: []float32{0, 1}},
		ports.Vector{ID: "c", Values: []float32{1, 1}})
	if err := s.Delete(ctx(t), "docs", []string{"a", "c", "missing"}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := s.Delete(ctx(t), "docs", nil); err != nil {
		t.Fatalf("Delete of no ids: %v", err)
	}
	if n := vsCount(t, s, "docs"); n != 1 {
		t.Fatalf("Count %d after deleting 2 of 3, want 1", n)
	}
	for _, id := range []string{"a", "c"} {
		if _, err := s.Get(ctx(t), "docs", id); !errors.Is(err, ports.ErrNotFound) {
			t.Fatalf("Get(%q) after Delete: err %v, want ErrNotFound", id, err)
		}
	}
	res := vsSearch(t, s, "docs", []float32{1, 0}, 10, nil)
	if len(res) != 1 || res[0].ID != "b" {
		t.Fatalf("Search after Delete gives %+v, want only b", res)
	}
}

// vsMentions reports whether the message names n as a number of its own.
func vsMentions(msg string, n int) bool {
	for _, f := range strings.FieldsFunc(msg, func(r rune) bool { return r < '0' || r > '9' }) {
		if f == strconv.Itoa(n) {
			return true
		}
	}
	return false
}

func vsWrongDimensionIsInvalidAndWritesNothing(t *testing.T, open func(t *testing.T) ports.VectorStore, _ VectorStoreCapabilities) {
	s := open(t)
	vsCreate(t, s, "docs", 7, ports.MetricCosine)
	good := []float32{1, 2, 3, 4, 5, 6, 7}
	vsUpsert(t, s, "docs", ports.Vector{ID: "kept", Values: good})
	bad := make([]float32, 13)
	bad[0] = 1
	err := s.Upsert(ctx(t), "docs", []ports.Vector{{ID: "new", Values: good}, {ID: "kept", Values: bad}})
	if !errors.Is(err, ports.ErrInvalidArgument) {
		t.Fatalf("Upsert of a 13-dimensional vector into a 7-dimensional collection: err %v, want ErrInvalidArgument", err)
	}
	if !vsMentions(err.Error(), 7) || !vsMentions(err.Error(), 13) {
		t.Fatalf("error %q does not name both dimensions, 7 and 13", err)
	}
	if n := vsCount(t, s, "docs"); n != 1 {
		t.Fatalf("a refused batch wrote: Count %d, want 1", n)
	}
	got, err := s.Get(ctx(t), "docs", "kept")
	if err != nil || !reflect.DeepEqual(got.Values, good) {
		t.Fatalf("a refused batch changed kept: %v %v", got.Values, err)
	}
	_, err = s.Search(ctx(t), "docs", []float32{1, 2, 3}, 3, nil)
	if !errors.Is(err, ports.ErrInvalidArgument) {
		t.Fatalf("Search with a 3-dimensional query in a 7-dimensional collection: err %v, want ErrInvalidArgument", err)
	}
	if !vsMentions(err.Error(), 7) || !vsMentions(err.Error(), 3) {
		t.Fatalf("error %q does not name both dimensions, 7 and 3", err)
	}
}

func vsInvalidInputIsRejected(t *testing.T, open func(t *testing.T) ports.VectorStore, _ VectorStoreCapabilities) {
	s := open(t)
	vsCreate(t, s, "docs", 2, ports.MetricEuclid)
	for _, v := range []ports.Vector{
		{ID: "", Values: []float32{1, 2}},
		{ID: "nan", Values: []float32{float32(math.NaN()), 1}},
		{ID: "inf", Values: []float32{float32(math.Inf(1)), 1}},
	} {
		if err := s.Upsert(ctx(t), "docs", []ports.Vector{v}); !errors.Is(err, ports.ErrInvalidArgument) {
			t.Fatalf("Upsert of %q %v: err %v, want ErrInvalidArgument", v.ID, v.Values, err)
		}
	}
	for _, k := range []int{0, -1} {
		if _, err := s.Search(ctx(t), "docs", []float32{1, 2}, k, nil); !errors.Is(err, ports.ErrInvalidArgument) {
			t.Fatalf("Search with k=%d: err %v, want ErrInvalidArgument", k, err)
		}
	}
	if n := vsCount(t, s, "docs"); n != 0 {
		t.Fatalf("refused upserts wrote %d vectors", n)
	}
}

// vsIDsAreBounded: vector ids are held to the bound of keys and document
// ids (1 to 1024 bytes of UTF-8 without NUL) in upsert, get and delete, so
// that no adapter keeps an id another would refuse.
func vsIDsAreBounded(t *testing.T, open func(t *testing.T) ports.VectorStore, _ VectorStoreCapabilities) {
	s := open(t)
	vsCreate(t, s, "v", 2, ports.MetricDot)
	for name, id := range map[string]string{
		"1025 bytes": strings.Repeat("x", 1025),
		"NUL":        "a\x00b",
		"not UTF-8":  "a\xffb",
	} {
		err := s.Upsert(ctx(t), "v", []ports.Vector{{ID: id, Values: []float32{1, 0}}})
		wantInvalid(t, "Upsert of an id of "+name, err)
		_, err = s.Get(ctx(t), "v", id)
		wantInvalid(t, "Get of an id of "+name, err)
		wantInvalid(t, "Delete of an id of "+name, s.Delete(ctx(t), "v", []string{"a", id}))
	}
	if n := vsCount(t, s, "v"); n != 0 {
		t.Fatalf("refused ids wrote %d vectors", n)
	}
	long := strings.Repeat("x", 1024)
	vsUpsert(t, s, "v", ports.Vector{ID: long, Values: []float32{1, 0}})
	if _, err := s.Get(ctx(t), "v", long); err != nil {
		t.Fatalf("Get of an id of 1024 bytes: %v", err)
	}
}

// vsScore is the brute-force score in float64: higher is closer for cosine
// and dot, lower for euclid.
func vsScore(m ports.Metric, a, b []float32) float64 {
	var dot, na, nb, dist float64
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		dot += x * y
		na += x * x
		nb += y * y
		dist += (x - y) * (x - y)
	}
	switch m {
	case ports.MetricCosine:
		if na == 0 || nb == 0 {
			return 0
		}
		return dot / math.Sqrt(na*nb)
	case ports.MetricDot:
		return dot
	}
	return math.Sqrt(dist)
}

// vsCloser orders two scores under a metric.
func vsCloser(m ports.Metric, a, b float64) bool {
	if m == ports.MetricEuclid {
		return a < b
	}
	return a > b
}

// vsRandomPoints makes n seeded random points with payloads to filter on:
// group g0..g4, even, and the index.
func vsRandomPoints(seed uint64, n, dim int) []ports.Vector {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	out := make([]ports.Vector, n)
	for i := range out {
		v := make([]float32, dim)
		for j := range v {
			v[j] = float32(r.Float64()*2 - 1)
		}
		out[i] = ports.Vector{
			ID:     fmt.Sprintf("p%04d", i),
			Values: v,
			Payload: map[string]any{
				"group": fmt.Sprintf("g%d", i%5),
				"even":  i%2 == 0,
				"n":     float64(i),
			},
		}
	}
	return out
}

func vsRandomQuery(r *rand.Rand, dim int) []float32 {
	q := make([]float32, dim)
	for j := range q {
		q[j] = float32(r.Float64()*2 - 1)
	}
	return q
}

// vsBruteForce ranks the points that pass keep against q, closest first.
func vsBruteForce(m ports.Metric, points []ports.Vector, q []float32, keep func(ports.Vector) bool) []ports.ScoredVector {
	var out []ports.ScoredVector
	for _, p := range points {
		if keep == nil || keep(p) {
			out = append(out, ports.ScoredVector{Vector: p, Score: vsScore(m, q, p.Values)})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return vsCloser(m, out[i].Score, out[j].Score) })
	return out
}

// vsCheckRanking compares a search result with the brute-force ranking: an
// exact adapter must return the same ids in the same order (exact ties may
// swap) with the same scores; an approximate one must reach the recall.
// It returns the recall.
func vsCheckRanking(t *testing.T, m ports.Metric, caps VectorStoreCapabilities, got []ports.ScoredVector, ranked []ports.ScoredVector, k int) float64 {
	t.Helper()
	want := ranked[:min(k, len(ranked))]
	if len(got) != len(want) {
		t.Fatalf("Search gave %d results, want %d", len(got), len(want))
	}
	byID := make(map[string]ports.ScoredVector, len(ranked))
	for _, p := range ranked {
		byID[p.ID] = p
	}
	seen := make(map[string]bool, len(got))
	for i, g := range got {
		truth, ok := byID[g.ID]
		if !ok {
			t.Fatalf("result %d is %q, which the query may not return", i, g.ID)
		}
		if seen[g.ID] {
			t.Fatalf("result %d repeats %q", i, g.ID)
		}
		seen[g.ID] = true
		vsSamePayload(t, "result "+g.ID, g.Payload, truth.Payload)
		vsSameValues(t, m, "result "+g.ID, g.Values, truth.Values)
		if i > 0 && vsCloser(m, g.Score, got[i-1].Score) && math.Abs(g.Score-got[i-1].Score) > vsScoreTolerance {
			t.Fatalf("results are not closest first: %q scores %v after %q at %v", g.ID, g.Score, got[i-1].ID, got[i-1].Score)
		}
	}
	if caps.Approximate {
		hits := 0
		for _, w := range want {
			if seen[w.ID] {
				hits++
			}
		}
		return float64(hits) / float64(len(want))
	}
	for i, g := range got {
		truth := byID[g.ID].Score
		if g.ID != want[i].ID && math.Abs(truth-want[i].Score) > vsTie*math.Max(1, math.Abs(truth)) {
			t.Fatalf("result %d is %q (score %v), want %q (score %v)", i, g.ID, truth, want[i].ID, want[i].Score)
		}
		if math.Abs(g.Score-truth) > vsScoreTolerance*math.Max(1, math.Abs(truth)) {
			t.Fatalf("result %d, %q, scores %v, want %v", i, g.ID, g.Score, truth)
		}
	}
	return 1
}

// vsLoadPoints fills a new collection with the seeded random points.
func vsLoadPoints(t *testing.T, s ports.VectorStore, name string, m ports.Metric, seed uint64) {
	t.Helper()
	vsCreate(t, s, name, vsDim, m)
	points := vsRandomPoints(seed, vsPoints, vsDim)
	for i := 0; i < len(points); i += 250 {
		vsUpsert(t, s, name, points[i:min(i+250, len(points))]...)
	}
	if n := vsCount(t, s, name); n != vsPoints {
		t.Fatalf("Count %d after upserting %d points", n, vsPoints)
	}
}

func vsSearchMatchesBruteForce(m ports.Metric) func(*testing.T, func(*testing.T) ports.VectorStore, VectorStoreCapabilities) {
	return func(t *testing.T, open func(t *testing.T) ports.VectorStore, caps VectorStoreCapabilities) {
		s := open(t)
		seed := uint64(len(m)) * 7919
		vsLoadPoints(t, s, "points", m, seed)
		points := vsRandomPoints(seed, vsPoints, vsDim)
		r := rand.New(rand.NewPCG(seed, 1))
		var recall float64
		for range vsQueries {
			q := vsRandomQuery(r, vsDim)
			got := vsSearch(t, s, "points", q, vsK, nil)
			recall += vsCheckRanking(t, m, caps, got, vsBruteForce(m, points, q, nil), vsK)
		}
		if recall /= vsQueries; recall < vsMinRecall {
			t.Fatalf("%s recall at k=%d is %.2f, want at least %.2f", m, vsK, recall, vsMinRecall)
		}
	}
}

func vsSearchWithAFilterMatchesBruteForce(t *testing.T, open func(t *testing.T) ports.VectorStore, caps VectorStoreCapabilities) {
	s := open(t)
	const seed = 424242
	vsLoadPoints(t, s, "points", ports.MetricCosine, seed)
	points := vsRandomPoints(seed, vsPoints, vsDim)
	r := rand.New(rand.NewPCG(seed, 2))
	filters := []map[string]any{
		{"group": "g3"},
		{"even": true},
		{"group": "g2", "even": false},
		{"n": 17},
	}
	for _, f := range filters {
		keep := func(p ports.Vector) bool {
			for k, v := range f {
				if !reflect.DeepEqual(vsJSON(t, map[string]any{k: p.Payload[k]}), vsJSON(t, map[string]any{k: v})) {
					return false
				}
			}
			return true
		}
		var recall float64
		for range vsQueries {
			q := vsRandomQuery(r, vsDim)
			got := vsSearch(t, s, "points", q, vsK, f)
			recall += vsCheckRanking(t, ports.MetricCosine, caps, got, vsBruteForce(ports.MetricCosine, points, q, keep), vsK)
		}
		if recall /= vsQueries; recall < vsMinRecall {
			t.Fatalf("filter %v: recall at k=%d is %.2f, want at least %.2f", f, vsK, recall, vsMinRecall)
		}
	}
}

func vsSearchFilterMatchingNothing(t *testing.T, open func(t *testing.T) ports.VectorStore, _ VectorStoreCapabilities) {
	s := open(t)
	vsCreate(t, s, "docs", 2, ports.MetricDot)
	vsUpsert(t, s, "docs",
		ports.Vector{ID: "a", Values: []float32{1, 0}, Payload: map[string]any{"lang": "en", "n": 1}},
		ports.Vector{ID: "b", Values: []float32{0, 1}, Payload: map[string]any{"lang": "fr"}},
		ports.Vector{ID: "c", Values: []float32{1, 1}})
	for _, f := range []map[string]any{
		{"lang": "de"},
		{"missing": "x"},
		{"lang": "en", "n": 2},
		{"n": "1"},
	} {
		if got := vsSearch(t, s, "docs", []float32{1, 1}, 10, f); len(got) != 0 {
			t.Fatalf("filter %v matches %+v, want nothing", f, got)
		}
	}
	got := vsSearch(t, s, "docs", []float32{1, 1}, 10, map[string]any{"lang": "fr"})
	if len(got) != 1 || got[0].ID != "b" {
		t.Fatalf("filter lang=fr gives %+v, want only b", got)
	}
}

func vsSearchWithKLargerThanTheCollection(t *testing.T, open func(t *testing.T) ports.VectorStore, caps VectorStoreCapabilities) {
	s := open(t)
	for _, m := range []ports.Metric{ports.MetricCosine, ports.MetricDot, ports.MetricEuclid} {
		name := "small_" + string(m)
		vsCreate(t, s, name, 3, m)
		points := vsRandomPoints(uint64(len(m)), 5, 3)
		vsUpsert(t, s, name, points...)
		q := []float32{0.5, -0.25, 1}
		got := vsSearch(t, s, name, q, 100, nil)
		vsCheckRanking(t, m, VectorStoreCapabilities{}, got, vsBruteForce(m, points, q, nil), 100)
	}
}

func vsSearchAnEmptyCollection(t *testing.T, open func(t *testing.T) ports.VectorStore, _ VectorStoreCapabilities) {
	s := open(t)
	vsCreate(t, s, "docs", 3, ports.MetricCosine)
	if got := vsSearch(t, s, "docs", []float32{1, 2, 3}, 10, nil); len(got) != 0 {
		t.Fatalf("an empty collection returns %+v", got)
	}
	if got := vsSearch(t, s, "docs", []float32{1, 2, 3}, 10, map[string]any{"a": "b"}); len(got) != 0 {
		t.Fatalf("an empty collection with a filter returns %+v", got)
	}
}

// vsSearchIsExactForLargeValues: values may be any finite float32, and
// an exact search still returns the true closest when a distance overflows
// float32 (an infinity, or NaN where products of opposite signs overflow)
// though it is finite in the float64 the scores are given in.
func vsSearchIsExactForLargeValues(t *testing.T, open func(t *testing.T) ports.VectorStore, caps VectorStoreCapabilities) {
	if caps.Approximate {
		t.Skipf("%s: approximate", adapterName(t))
	}
	s := open(t)
	// Every squared distance is past float32's range, none past float64's.
	vsCreate(t, s, "euclid", 2, ports.MetricEuclid)
	var points []ports.Vector
	for i := range 40 {
		points = append(points, ports.Vector{ID: fmt.Sprintf("p%02d", i), Values: []float32{float32(i) * 1e19, 2e19}})
	}
	vsUpsert(t, s, "euclid", points...)
	q := []float32{39e19, 0}
	got := vsSearch(t, s, "euclid", q, 1, nil)
	want := vsBruteForce(ports.MetricEuclid, points, q, nil)
	if len(got) != 1 || got[0].ID != want[0].ID {
		t.Errorf("euclid over values near 1e19: top 1 is %+v, want %s (distance %g)", got, want[0].ID, want[0].Score)
	}
	// a0's products with q are +Inf and -Inf in float32, in two
	// dimensions far enough apart that a vector kernel sums them in
	// separate lanes; its float64 score is 0, below every other.
	const dim = 16
	a0 := make([]float32, dim)
	a0[0], a0[1] = 1e20, -1e20
	points = []ports.Vector{{ID: "a0", Values: a0}}
	for i := 1; i <= 40; i++ {
		v := make([]float32, dim)
		v[0] = float32(i)
		points = append(points, ports.Vector{ID: fmt.Sprintf("b%02d", i), Values: v})
	}
	vsCreate(t, s, "dot", dim, ports.MetricDot)
	vsUpsert(t, s, "dot", points...)
	q = make([]float32, dim)
	q[0], q[1] = 1e20, 1e20
	got = vsSearch(t, s, "dot", q, 1, nil)
	want = vsBruteForce(ports.MetricDot, points, q, nil)
	if len(got) != 1 || got[0].ID != want[0].ID {
		t.Errorf("dot with one float32 score NaN: top 1 is %+v, want %s (score %g)", got, want[0].ID, want[0].Score)
	}
}

// vsSearchIsExactForTinyValues holds an exact search to its promise where
// the distances are too small for float32: products and squares below
// about 1e-45 round to zero there, so a ranking by the float32 sums alone
// sees every vector tie and keeps the lowest ids, however far they are
// from the query.
func vsSearchIsExactForTinyValues(t *testing.T, open func(t *testing.T) ports.VectorStore, caps VectorStoreCapabilities) {
	if caps.Approximate {
		t.Skipf("%s: approximate", adapterName(t))
	}
	s := open(t)
	// Every squared distance is near 1e-60; p39 is the closest.
	vsCreate(t, s, "euclid", 2, ports.MetricEuclid)
	var points []ports.Vector
	for i := range 40 {
		points = append(points, ports.Vector{ID: fmt.Sprintf("p%02d", i), Values: []float32{float32(40-i) * 1e-30, 0}})
	}
	vsUpsert(t, s, "euclid", points...)
	q := []float32{0, 0}
	got := vsSearch(t, s, "euclid", q, 1, nil)
	want := vsBruteForce(ports.MetricEuclid, points, q, nil)
	if len(got) != 1 || got[0].ID != want[0].ID {
		t.Errorf("euclid over values near 1e-30: top 1 is %+v, want %s (distance %g)", got, want[0].ID, want[0].Score)
	}
	// Every product with the query is near -1e-60; p39's is the highest.
	vsCreate(t, s, "dot", 2, ports.MetricDot)
	vsUpsert(t, s, "dot", points...)
	q = []float32{-1e-30, 0}
	got = vsSearch(t, s, "dot", q, 1, nil)
	want = vsBruteForce(ports.MetricDot, points, q, nil)
	if len(got) != 1 || got[0].ID != want[0].ID {
		t.Errorf("dot over values near 1e-30: top 1 is %+v, want %s (score %g)", got, want[0].ID, want[0].Score)
	}
}

func vsTwoHandlesShareTheStore(t *testing.T, open func(t *testing.T) ports.VectorStore, _ VectorStoreCapabilities) {
	a, b := open(t), open(t)
	vsCreate(t, a, "docs", 2, ports.MetricEuclid)
	vsCreate(t, b, "docs", 2, ports.MetricEuclid)
	if err := b.CreateCollection(ctx(t), "docs", 2, ports.MetricDot); !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("CreateCollection on the second handle with other settings: err %v, want ErrConflict", err)
	}
	vsUpsert(t, a, "docs", ports.Vector{ID: "x", Values: []float32{1, 2}, Payload: map[string]any{"by": "a"}})
	got, err := b.Get(ctx(t), "docs", "x")
	if err != nil {
		t.Fatalf("Get on the second handle: %v", err)
	}
	vsSamePayload(t, "Get on the second handle", got.Payload, map[string]any{"by": "a"})
	if err := b.DeleteCollection(ctx(t), "docs"); err != nil {
		t.Fatalf("DeleteCollection on the second handle: %v", err)
	}
	if _, err := a.Count(ctx(t), "docs"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Count on the first handle after the second deleted: err %v, want ErrNotFound", err)
	}
}

func vsConcurrentUpsertsLoseNothing(t *testing.T, open func(t *testing.T) ports.VectorStore, _ VectorStoreCapabilities) {
	a, b := open(t), open(t)
	vsCreate(t, a, "docs", 4, ports.MetricDot)
	const writers, each = 16, 10
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range writers {
		s := a
		if w%2 == 1 {
			s = b
		}
		wg.Go(func() {
			<-start
			for i := range each {
				v := ports.Vector{ID: fmt.Sprintf("w%d-%d", w, i), Values: []float32{float32(w), float32(i), 1, 0}}
				if err := vsUpsertUntilDone(t, s, "docs", v); err != nil {
					t.Errorf("writer %d: Upsert %s: %v", w, v.ID, err)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if n := vsCount(t, b, "docs"); n != writers*each {
		t.Fatalf("Count %d after %d concurrent upserts of distinct ids", n, writers*each)
	}
}

// concurrentCallTimeout bounds an upsert of ConcurrentUpsertsLoseNothing,
// sendings again included. Two handles on one store may meet at a lock that
// serves no one in turn (a SQLite file's): on a loaded machine the writes of
// one handle may wait while the other's go on, longer than callTimeout. The
// subtest proves that no upsert is lost, not how soon one lands.
const concurrentCallTimeout = time.Minute

// vsUpsertUntilDone upserts v, and sends it again while the store answers
// that it did not do it (ports.ErrNotDone), as a client may, within
// concurrentCallTimeout.
func vsUpsertUntilDone(t *testing.T, s ports.VectorStore, name string, v ports.Vector) error {
	c, cancel := context.WithTimeout(t.Context(), concurrentCallTimeout)
	defer cancel()
	for {
		err := s.Upsert(c, name, []ports.Vector{v})
		if !errors.Is(err, ports.ErrNotDone) || c.Err() != nil {
			return err
		}
	}
}

// vsLive is what a collection holds, as the suite wrote it.
type vsLive map[string]ports.Vector

func (l vsLive) put(vs ...ports.Vector) {
	for _, v := range vs {
		l[v.ID] = v
	}
}

func (l vsLive) points() []ports.Vector {
	out := make([]ports.Vector, 0, len(l))
	for _, v := range l {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// vsExpectSearches asks random queries, unfiltered and filtered on a
// group, and holds the answers to the brute force over what the collection
// holds: every result is a live vector scored for its current values, and
// the ranking is exact or, for an approximate adapter, reaches the recall.
func vsExpectSearches(t *testing.T, s ports.VectorStore, name string, m ports.Metric, caps VectorStoreCapabilities, live vsLive, r *rand.Rand, dim int) {
	t.Helper()
	points := live.points()
	byID := map[string]ports.Vector(live)
	for _, filter := range []map[string]any{nil, {"group": "g1"}} {
		keep := func(p ports.Vector) bool { return filter == nil || p.Payload["group"] == filter["group"] }
		var recall float64
		for range vsQueries {
			q := vsRandomQuery(r, dim)
			got := vsSearch(t, s, name, q, vsK, filter)
			ranked := vsBruteForce(m, points, q, keep)
			if len(ranked) == 0 {
				if len(got) != 0 {
					t.Fatalf("filter %v: Search gives %d results where nothing matches", filter, len(got))
				}
				recall++
				continue
			}
			for _, g := range got {
				v, ok := byID[g.ID]
				if !ok {
					continue // vsCheckRanking names it
				}
				if truth := vsScore(m, q, v.Values); math.Abs(g.Score-truth) > vsScoreTolerance*math.Max(1, math.Abs(truth)) {
					t.Fatalf("filter %v: %q scores %v, want %v for its current values", filter, g.ID, g.Score, truth)
				}
			}
			recall += vsCheckRanking(t, m, caps, got, ranked, vsK)
		}
		if recall /= vsQueries; recall < vsMinRecall {
			t.Fatalf("filter %v: recall at k=%d is %.2f over %d vectors, want at least %.2f", filter, vsK, recall, len(points), vsMinRecall)
		}
	}
}

// vsMoved gives the points new values under the same ids and payloads.
func vsMoved(r *rand.Rand, points []ports.Vector) []ports.Vector {
	out := make([]ports.Vector, len(points))
	for i, p := range points {
		out[i] = ports.Vector{ID: p.ID, Values: vsRandomQuery(r, len(p.Values)), Payload: p.Payload}
	}
	return out
}

func vsIDs(points []ports.Vector) []string {
	out := make([]string, len(points))
	for i, p := range points {
		out[i] = p.ID
	}
	return out
}

func vsDeleteIDs(t *testing.T, s ports.VectorStore, name string, live vsLive, ids []string) {
	t.Helper()
	if err := s.Delete(ctx(t), name, ids); err != nil {
		t.Fatalf("Delete %d ids from %q: %v", len(ids), name, err)
	}
	for _, id := range ids {
		delete(live, id)
	}
}

// A handle that keeps an index in memory must see what another handle
// wrote, deleted and rewrote, in its next search.
func vsSearchSeesTheOtherHandlesWrites(t *testing.T, open func(t *testing.T) ports.VectorStore, caps VectorStoreCapabilities) {
	a, b := open(t), open(t)
	const dim = 8
	r := rand.New(rand.NewPCG(88, 1))
	vsCreate(t, a, "docs", dim, ports.MetricCosine)
	live := vsLive{}
	points := vsRandomPoints(88, 200, dim)
	vsUpsert(t, a, "docs", points...)
	live.put(points...)
	vsExpectSearches(t, b, "docs", ports.MetricCosine, caps, live, r, dim)
	vsDeleteIDs(t, a, "docs", live, vsIDs(points[:40]))
	moved := vsMoved(r, points[40:80])
	vsUpsert(t, a, "docs", moved...)
	live.put(moved...)
	vsExpectSearches(t, b, "docs", ports.MetricCosine, caps, live, r, dim)
	back := vsMoved(r, points[:20])
	vsUpsert(t, b, "docs", back...)
	live.put(back...)
	vsExpectSearches(t, a, "docs", ports.MetricCosine, caps, live, r, dim)
	vsExpectSearches(t, b, "docs", ports.MetricCosine, caps, live, r, dim)
	if err := a.DeleteCollection(ctx(t), "docs"); err != nil {
		t.Fatalf("DeleteCollection: %v", err)
	}
	vsCreate(t, a, "docs", dim, ports.MetricEuclid)
	fresh := vsRandomPoints(89, 30, dim)
	vsUpsert(t, a, "docs", fresh...)
	vsExpectSearches(t, b, "docs", ports.MetricEuclid, caps, vsLive{}.with(fresh), r, dim)
}

func (l vsLive) with(vs []ports.Vector) vsLive {
	l.put(vs...)
	return l
}

// An index that switches to an approximate structure past some size must
// keep answering as the collection grows past it, has vectors replaced and
// deleted, and shrinks below it again.
func vsSearchFollowsGrowthReplacesAndShrinking(t *testing.T, open func(t *testing.T) ports.VectorStore, caps VectorStoreCapabilities) {
	s := open(t)
	const dim = 16
	for _, m := range []ports.Metric{ports.MetricCosine, ports.MetricDot, ports.MetricEuclid} {
		name := "grow_" + string(m)
		r := rand.New(rand.NewPCG(uint64(len(m)), 77))
		vsCreate(t, s, name, dim, m)
		points := vsRandomPoints(uint64(len(m))+100, 600, dim)
		live := vsLive{}
		for _, n := range []int{10, 100, 300, 600} {
			add := points[len(live):n]
			vsUpsert(t, s, name, add...)
			live.put(add...)
			vsExpectSearches(t, s, name, m, caps, live, r, dim)
			vsIndexedWithin(t, s, name, len(live))
		}
		moved := vsMoved(r, points[:300])
		vsUpsert(t, s, name, moved...)
		live.put(moved...)
		vsExpectSearches(t, s, name, m, caps, live, r, dim)
		vsDeleteIDs(t, s, name, live, vsIDs(points[20:590]))
		if n := vsCount(t, s, name); n != len(live) {
			t.Fatalf("%s: Count %d after the deletes, want %d", name, n, len(live))
		}
		vsIndexedWithin(t, s, name, len(live))
		vsExpectSearches(t, s, name, m, caps, live, r, dim)
		vsDeleteIDs(t, s, name, live, vsIDs(points))
		if got := vsSearch(t, s, name, vsRandomQuery(r, dim), vsK, nil); len(got) != 0 {
			t.Fatalf("%s: an emptied collection returns %d results", name, len(got))
		}
		vsUpsert(t, s, name, points[:50]...)
		live.put(points[:50]...)
		vsExpectSearches(t, s, name, m, caps, live, r, dim)
	}
}

// A handle opened after the writes (an engine restarting on the same data)
// searches all of it.
func vsANewHandleSearchesEverything(t *testing.T, open func(t *testing.T) ports.VectorStore, caps VectorStoreCapabilities) {
	a := open(t)
	const dim = 12
	r := rand.New(rand.NewPCG(99, 3))
	vsCreate(t, a, "docs", dim, ports.MetricDot)
	points := vsRandomPoints(99, 800, dim)
	live := vsLive{}
	for i := 0; i < len(points); i += 200 {
		vsUpsert(t, a, "docs", points[i:i+200]...)
	}
	live.put(points...)
	vsDeleteIDs(t, a, "docs", live, vsIDs(points[:150]))
	moved := vsMoved(r, points[150:300])
	vsUpsert(t, a, "docs", moved...)
	live.put(moved...)
	b := open(t)
	if n := vsCount(t, b, "docs"); n != len(live) {
		t.Fatalf("a new handle counts %d vectors, want %d", n, len(live))
	}
	vsExpectSearches(t, b, "docs", ports.MetricDot, caps, live, r, dim)
}

// vsIndexedWithin checks that a collection's index, if it reports one,
// holds no more vectors than the collection.
func vsIndexedWithin(t *testing.T, s ports.VectorStore, name string, n int) {
	t.Helper()
	cs, err := s.Collections(ctx(t))
	if err != nil {
		t.Fatalf("Collections: %v", err)
	}
	for _, c := range cs {
		if c.Name == name && (c.Indexed < 0 || c.Indexed > n) {
			t.Fatalf("%s lists %d indexed vectors, holding %d", name, c.Indexed, n)
		}
	}
}
