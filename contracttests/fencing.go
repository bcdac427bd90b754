package contracttests

import (
	"context"
	"errors"
	"testing"

	"github.com/abi-engine/engine/ports"
)

// A store that engines share (Fenced in an adapter's capabilities) keeps
// the newest fencing token a write brought to it (ports.FencingToken, the
// lease revision a serving term began at) and refuses every write of an
// older term with ports.ErrFenced, changing nothing. That is what stops an
// engine paused across a takeover from writing over its successor when it
// resumes with calls in hand. Two handles on one store stand for the two
// engines here. A write without a token (a tool's, a test's) passes the
// fence and leaves it where it was.

// underTerm is the context of a call admitted under the serving term token.
func underTerm(t *testing.T, token uint64) context.Context {
	return ports.WithFencingToken(ctx(t), token)
}

// wantFenced fails the test unless err is ErrFenced.
func wantFenced(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, ports.ErrFenced) {
		t.Fatalf("%s under an older term: %v, want ErrFenced", what, err)
	}
}

// Fencing terms: the paused engine's, its successor's, and a later one.
const (
	termOld   = 3
	termNew   = 5
	termLater = 8
)

func docFencing(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	successor, paused := open(t), open(t)
	docEnsure(t, successor, "c", "d")
	old, cur := underTerm(t, termOld), underTerm(t, termNew)

	// Before the successor writes, nothing fences the old term.
	first, err := paused.Put(old, "c", "x", map[string]any{"by": "old"}, ports.Cond{})
	if err != nil {
		t.Fatalf("Put under the only term yet: %v", err)
	}
	// A newer term's first write fails with an error (its collection is
	// not there); it fences the older term all the same.
	mid := underTerm(t, termNew-1)
	if _, err := successor.Put(mid, "missing", "x", map[string]any{"by": "mid"}, ports.Cond{}); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Put under a newer term into a collection not made: %v, want ErrNotFound", err)
	}
	_, err = paused.Put(old, "c", "x", map[string]any{"by": "old again"}, ports.Cond{})
	wantFenced(t, "Put after a newer term's write failed with an error", err)
	// The next term's first write fails on its condition, without an
	// error; it fences the term before it all the same.
	if _, err := successor.Put(cur, "c", "x", map[string]any{"by": "new"}, ports.IfVersion(first.Version+1)); !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("Put under the newer term at a version not stored: %v, want ErrConflict", err)
	}
	_, err = paused.Put(mid, "c", "x", map[string]any{"by": "mid"}, ports.Cond{})
	wantFenced(t, "Put after a newer term's write failed on its condition", err)
	kept, err := successor.Put(cur, "c", "x", map[string]any{"by": "new"}, ports.IfVersion(first.Version))
	if err != nil {
		t.Fatalf("Put under the newer term: %v", err)
	}

	_, err = paused.Put(old, "c", "x", map[string]any{"by": "old again"}, ports.Cond{})
	wantFenced(t, "Put", err)
	_, err = paused.Put(old, "c", "y", map[string]any{"by": "old"}, ports.Cond{})
	wantFenced(t, "Put of a new document", err)
	wantFenced(t, "Delete", paused.Delete(old, "c", "x", ports.Cond{}))
	wantFenced(t, "EnsureCollection", paused.EnsureCollection(old, "e"))
	wantFenced(t, "DropCollection", paused.DropCollection(old, "d"))
	// A term between the two is as old as any other.
	_, err = paused.Put(underTerm(t, termNew-1), "c", "x", map[string]any{"by": "between"}, ports.Cond{})
	wantFenced(t, "Put", err)

	if got := docMustGet(t, successor, "c", "x"); got.Version != kept.Version || got.Data["by"] != "new" {
		t.Fatalf("after the refused writes, x = version %d %v; want version %d by the newer term", got.Version, got.Data, kept.Version)
	}
	docMustBeMissing(t, successor, "c", "y")
	if names := docCollections(t, successor); len(names) != 2 || names[0] != "c" || names[1] != "d" {
		t.Fatalf("after the refused writes, collections = %q; want [c d]", names)
	}

	// The newer term goes on writing, through either handle; so does a
	// later one, which fences the newer term in its turn; a write without
	// a token (a tool, a test) is not fenced.
	if _, err := paused.Put(cur, "c", "x", map[string]any{"by": "new, other handle"}, ports.Cond{}); err != nil {
		t.Fatalf("Put under the newer term on the other handle: %v", err)
	}
	if _, err := successor.Put(underTerm(t, termLater), "c", "z", map[string]any{"by": "later"}, ports.Cond{}); err != nil {
		t.Fatalf("Put under a later term: %v", err)
	}
	_, err = successor.Put(cur, "c", "x", map[string]any{"by": "new"}, ports.Cond{})
	wantFenced(t, "Put of the term a later one followed", err)
	if _, err := paused.Put(ctx(t), "c", "w", map[string]any{"by": "a tool"}, ports.Cond{}); err != nil {
		t.Fatalf("Put without a token: %v", err)
	}
	// A write without a token passed and left the fence at the later term.
	_, err = paused.Put(cur, "c", "x", map[string]any{"by": "new"}, ports.Cond{})
	wantFenced(t, "Put of an older term after a write without a token", err)
}

func vsFencing(t *testing.T, open func(t *testing.T) ports.VectorStore) {
	successor, paused := open(t), open(t)
	vsCreate(t, successor, "c", 2, ports.MetricCosine)
	vsCreate(t, successor, "d", 2, ports.MetricCosine)
	old, cur := underTerm(t, termOld), underTerm(t, termNew)

	if err := paused.Upsert(old, "c", []ports.Vector{{ID: "x", Values: []float32{1, 0}}}); err != nil {
		t.Fatalf("Upsert under the only term yet: %v", err)
	}
	// The newer term's first write is refused as invalid; it fences the
	// older term all the same.
	if err := successor.Upsert(cur, "c", []ports.Vector{{ID: "x", Values: []float32{0, 1, 0}}}); !errors.Is(err, ports.ErrInvalidArgument) {
		t.Fatalf("Upsert under the newer term of a vector of the wrong dimension: %v, want ErrInvalidArgument", err)
	}
	wantFenced(t, "Upsert after a failed write of the newer term", paused.Upsert(old, "c", []ports.Vector{{ID: "x", Values: []float32{1, 0}}}))
	if err := successor.Upsert(cur, "c", []ports.Vector{{ID: "x", Values: []float32{0, 1}}}); err != nil {
		t.Fatalf("Upsert under the newer term: %v", err)
	}

	wantFenced(t, "Upsert", paused.Upsert(old, "c", []ports.Vector{{ID: "x", Values: []float32{1, 0}}, {ID: "y", Values: []float32{1, 1}}}))
	wantFenced(t, "Delete", paused.Delete(old, "c", []string{"x"}))
	wantFenced(t, "CreateCollection", paused.CreateCollection(old, "e", 2, ports.MetricCosine))
	wantFenced(t, "DeleteCollection", paused.DeleteCollection(old, "d"))

	got, err := successor.Get(ctx(t), "c", "x")
	if err != nil || len(got.Values) != 2 || got.Values[0] != 0 || got.Values[1] != 1 {
		t.Fatalf("after the refused writes, x = %v, %v; want the newer term's [0 1]", got.Values, err)
	}
	if n := vsCount(t, successor, "c"); n != 1 {
		t.Fatalf("after the refused writes, c holds %d vectors, want 1", n)
	}
	cols, err := successor.Collections(ctx(t))
	if err != nil || len(cols) != 2 || cols[0].Name != "c" || cols[1].Name != "d" {
		t.Fatalf("after the refused writes, collections = %+v, %v; want c and d", cols, err)
	}
	// Neither handle's index took a refused write.
	for _, s := range []ports.VectorStore{successor, paused} {
		found := vsSearch(t, s, "c", []float32{1, 1}, 10, nil)
		if len(found) != 1 || found[0].ID != "x" {
			t.Fatalf("after the refused writes, a search finds %+v; want x alone", found)
		}
	}

	if err := successor.Upsert(underTerm(t, termLater), "c", []ports.Vector{{ID: "z", Values: []float32{1, 1}}}); err != nil {
		t.Fatalf("Upsert under a later term: %v", err)
	}
	wantFenced(t, "Upsert of the term a later one followed", paused.Upsert(cur, "c", []ports.Vector{{ID: "x", Values: []float32{1, 0}}}))
	if err := paused.Upsert(ctx(t), "c", []ports.Vector{{ID: "w", Values: []float32{1, 0}}}); err != nil {
		t.Fatalf("Upsert without a token: %v", err)
	}
	// A write without a token passed and left the fence at the later term.
	wantFenced(t, "Upsert of an older term after a write without a token", paused.Upsert(cur, "c", []ports.Vector{{ID: "x", Values: []float32{1, 0}}}))
}

func kvFencing(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	successor, paused := open(t), open(t)
	old, cur := underTerm(t, termOld), underTerm(t, termNew)

	if err := paused.Set(old, "x", []byte("old"), 0); err != nil {
		t.Fatalf("Set under the only term yet: %v", err)
	}
	// The newer term's first write changes nothing; it fences the older
	// term all the same.
	if won, err := successor.SetIfAbsent(cur, "x", []byte("new"), 0); won || err != nil {
		t.Fatalf("SetIfAbsent under the newer term of a key set: %v, %v; want false", won, err)
	}
	wantFenced(t, "Set after the newer term's first write", paused.Set(old, "x", []byte("old again"), 0))
	if err := successor.Set(cur, "x", []byte("new"), 0); err != nil {
		t.Fatalf("Set under the newer term: %v", err)
	}

	wantFenced(t, "Set", paused.Set(old, "x", []byte("old again"), 0))
	_, err := paused.SetIfAbsent(old, "y", []byte("old"), 0)
	wantFenced(t, "SetIfAbsent", err)
	_, err = paused.Delete(old, "x")
	wantFenced(t, "Delete", err)
	_, err = paused.DeleteIfValue(old, "x", []byte("new"))
	wantFenced(t, "DeleteIfValue", err)
	wantFenced(t, "Set", paused.Set(underTerm(t, termNew-1), "x", []byte("between"), 0))

	for _, s := range []ports.KeyValue{successor, paused} {
		if v, err := s.Get(cur, "x"); err != nil || string(v) != "new" {
			t.Fatalf("after the refused writes, x = %q, %v; want the newer term's %q", v, err, "new")
		}
		if _, err := s.Get(cur, "y"); !errors.Is(err, ports.ErrNotFound) {
			t.Fatalf("after a refused SetIfAbsent, y: %v, want ErrNotFound", err)
		}
	}

	if err := paused.Set(cur, "x", []byte("new, other handle"), 0); err != nil {
		t.Fatalf("Set under the newer term on the other handle: %v", err)
	}
	if err := successor.Set(underTerm(t, termLater), "z", []byte("later"), 0); err != nil {
		t.Fatalf("Set under a later term: %v", err)
	}
	wantFenced(t, "Set of the term a later one followed", successor.Set(cur, "x", []byte("new"), 0))
	if err := paused.Set(ctx(t), "w", []byte("a tool"), 0); err != nil {
		t.Fatalf("Set without a token: %v", err)
	}
	// A write without a token passed and left the fence at the later term.
	wantFenced(t, "Set of an older term after a write without a token", paused.Set(cur, "x", []byte("new"), 0))
}
