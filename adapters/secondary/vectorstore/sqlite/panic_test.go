package sqlite

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/abi-engine/engine/ports"
)

// A panic while a collection is read into its index, on the load at open,
// which runs on a goroutine of its own, does not end the process: the
// index it left part loaded is dropped, and the next search loads the
// collection whole and finds every vector. A panic while a search catches
// up fails that search with an error, and the one after answers in full.
// Before, the panic at open ended the process, and with it an engine
// holding the lease.
func TestAPanicWhileAnIndexLoadsFailsTheLoadNotTheProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vectors.sqlite")
	w := writeCollection(t, path)
	ctx := t.Context()
	var panics atomic.Int32
	panics.Store(1)
	s, err := open(ctx, Config{Path: path, IndexThreshold: 64}, syncHooks{catchUp: func(string) {
		if panics.Add(-1) >= 0 {
			panic("a broken row")
		}
	}})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	<-s.loaded
	if panics.Load() != 0 {
		t.Fatal("the load at open did not read the collection")
	}
	all := func() error {
		got, err := s.Search(ctx, "v", []float32{0, 0}, 200, nil)
		if err != nil {
			return err
		}
		if len(got) != 200 || got[0].ID != "v000" || got[199].ID != "v199" {
			return fmt.Errorf("a search for every vector finds %d", len(got))
		}
		return nil
	}
	if err := all(); err != nil {
		t.Fatalf("after the load at open panicked: %v", err)
	}
	// A write through the other handle: s's next search catches up.
	if err := w.Upsert(ctx, "v", []ports.Vector{{ID: "v000", Values: []float32{0, 0}}}); err != nil {
		t.Fatalf("Upsert: %v", err)
	}
	panics.Store(1)
	if err := all(); !errors.Is(err, errLoadPanicked) {
		t.Fatalf("a search whose catch-up panicked answers %v, want an error of the panic", err)
	}
	if err := all(); err != nil {
		t.Fatalf("the search after the one whose catch-up panicked: %v", err)
	}
}
