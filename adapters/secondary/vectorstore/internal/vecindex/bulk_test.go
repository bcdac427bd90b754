package vecindex

import (
	"fmt"
	"testing"

	"github.com/abi-engine/engine/ports"
)

// checkBookkeeping fails t unless the index's maps agree with its slots:
// every id maps to the slot that holds it, and every term is held by as
// many live slots as its count says, no term by none.
func checkBookkeeping(t *testing.T, x *Index) {
	t.Helper()
	x.mu.RLock()
	defer x.mu.RUnlock()
	held := map[uint32]int32{}
	live := 0
	for s, id := range x.ids {
		if id == "" {
			if len(x.terms[s]) != 0 {
				t.Errorf("slot %d holds no vector but terms %v", s, x.terms[s])
			}
			continue
		}
		live++
		if got, ok := x.slots[id]; !ok || got != int32(s) {
			t.Errorf("slot %d holds %s, which maps to slot %d (%v)", s, id, got, ok)
		}
		for _, term := range x.terms[s] {
			held[term]++
		}
	}
	if live != x.live || len(x.slots) != live {
		t.Errorf("%d slots hold a vector, the index counts %d and maps %d ids", live, x.live, len(x.slots))
	}
	for key, term := range x.dict.ids {
		if x.dict.refs[term] != held[term] || x.dict.keys[term] != key {
			t.Errorf("term %d (%q) is counted %d times and held %d times, named %q", term, key, x.dict.refs[term], held[term], x.dict.keys[term])
		}
	}
	if len(x.dict.ids) != len(held) {
		t.Errorf("the dictionary holds %d terms, the slots %d", len(x.dict.ids), len(held))
	}
}

// found reports the ids a search with filter finds, up to 100.
func found(x *Index, q []float32, filter map[string]any) map[string]bool {
	out := map[string]bool{}
	for _, c := range x.Search(q, 100, filter) {
		out[c.ID] = true
	}
	return out
}

// An id twice in a batch as large as the index, whose maps are then made
// before the lock and swapped in, ends with the vector and payload of its
// last entry: the terms its first entry added are dropped again, and so
// are the ones it held before, whether it was in the index or new to it.
func TestAnIdTwiceInALargeBatchKeepsOnlyItsLastEntry(t *testing.T) {
	x := New(2, ports.MetricEuclid, Options{Threshold: -1})
	t.Cleanup(x.Close)
	x.Put([]Entry{
		{ID: "a", Values: []float32{0, 0}, Payload: map[string]any{"k": "old"}},
		{ID: "b", Values: []float32{9, 9}, Payload: map[string]any{"k": "kept"}},
	})
	x.Put([]Entry{
		{ID: "a", Values: []float32{1, 1}, Payload: map[string]any{"k": "first"}},
		{ID: "n", Values: []float32{2, 2}, Payload: map[string]any{"k": "n-first"}},
		{ID: "a", Values: []float32{3, 3}, Payload: map[string]any{"k": "last"}},
		{ID: "n", Values: []float32{4, 4}, Payload: map[string]any{"k": "n-last"}},
	})
	checkBookkeeping(t, x)
	if x.Len() != 3 {
		t.Fatalf("the index holds %d vectors, want a, b and n", x.Len())
	}
	for k, want := range map[string]string{"old": "", "first": "", "n-first": "", "last": "a", "n-last": "n", "kept": "b"} {
		got := found(x, []float32{0, 0}, map[string]any{"k": k})
		if (want == "" && len(got) != 0) || (want != "" && (len(got) != 1 || !got[want])) {
			t.Errorf("a search for k=%s finds %v, want %q", k, got, want)
		}
	}
	if got := x.Search([]float32{3, 3}, 1, nil); len(got) == 0 || got[0].ID != "a" || got[0].Distance != 0 {
		t.Errorf("a search for a's last values finds %+v, want a at distance 0", got)
	}
}

// A search while a large batch is staged sees the index as it was; when
// the graph builder puts a replaced vector's old slot into the graph
// between Stage and Publish, the vector moves to a new slot at Publish,
// and so does what a later entry of the same id in the batch writes,
// with the maps made before the lock following it.
func TestALargeBatchPublishedAfterTheBuilderLinkedAnOldSlotKeepsEveryVector(t *testing.T) {
	x := New(2, ports.MetricEuclid, Options{Threshold: 10})
	t.Cleanup(x.Close)
	// Closed, the index starts no builder: the test runs its slices
	// itself, at the point it chooses.
	x.mu.Lock()
	x.closed = true
	x.mu.Unlock()
	var base []Entry
	for i := range 20 {
		base = append(base, Entry{ID: fmt.Sprint("v", i), Values: []float32{float32(i), 0}, Payload: map[string]any{"k": "base"}})
	}
	x.Put(base)
	if !x.Approximate() || x.Indexed() != 0 {
		t.Fatalf("after the first put: approximate %v with %d indexed; want a graph holding none yet", x.Approximate(), x.Indexed())
	}
	batch := []Entry{
		{ID: "v0", Values: []float32{0, 100}, Payload: map[string]any{"k": "first"}},
		{ID: "v0", Values: []float32{0, 200}, Payload: map[string]any{"k": "last"}},
	}
	for i := range 20 {
		batch = append(batch, Entry{ID: fmt.Sprint("w", i), Values: []float32{float32(i), 50}, Payload: map[string]any{"k": "new"}})
	}
	st := x.Stage(batch)
	if st.bulk == nil {
		t.Fatal("a batch as large as the index was not planned")
	}
	if got := found(x, []float32{0, 0}, map[string]any{"k": "base"}); len(got) != 20 || !got["v0"] {
		t.Fatalf("while the batch is staged, a search finds %d vectors of k=base (v0 among them: %v), want all 20", len(got), got["v0"])
	}
	if got := found(x, []float32{0, 0}, map[string]any{"k": "new"}); len(got) != 0 {
		t.Fatalf("while the batch is staged, a search finds %v of k=new, want none", got)
	}
	x.mu.Lock()
	x.closed = false
	x.mu.Unlock()
	for x.buildSlice() {
	}
	if x.Indexed() != 20 {
		t.Fatalf("the builder put %d vectors into the graph, want 20", x.Indexed())
	}
	st.Publish()
	waitBuilt(t, x)
	checkBookkeeping(t, x)
	if x.Len() != 40 {
		t.Fatalf("the index holds %d vectors, want 40", x.Len())
	}
	if got := x.Search([]float32{0, 200}, 1, nil); len(got) == 0 || got[0].ID != "v0" || got[0].Distance != 0 {
		t.Errorf("a search for v0's last values finds %+v, want v0 at distance 0", got)
	}
	for k, want := range map[string]int{"base": 19, "first": 0, "last": 1, "new": 20} {
		if got := found(x, []float32{0, 0}, map[string]any{"k": k}); len(got) != want || (k == "base" && got["v0"]) {
			t.Errorf("a search for k=%s finds %v, want %d vectors", k, got, want)
		}
	}
}
