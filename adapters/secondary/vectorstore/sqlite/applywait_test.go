package sqlite

import (
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/abi-engine/engine/ports"
)

// A write of the handle that has found no sync of its index under way,
// and goes on to hand its change to the index, is answered without
// waiting for a load that a search begins at that very moment: either
// the search waits for the write's brief turn at the index, or the write
// leaves its change to the next search. Before, the write looked for a
// sync under way and then waited for the index's lock, and a load begun
// between the two held that lock for as long as it read the file.
func TestAWriteDoesNotWaitForALoadBegunAsItTakesItsChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vectors.sqlite")
	w := writeCollection(t, path) // "v": v000 to v199 at (i, 0)
	s := openLoaded(t, path)
	ctx := t.Context()
	// The handle's index falls behind the file, so its next search
	// loads what was written.
	if err := w.Upsert(ctx, "v", []ports.Vector{{ID: "far", Values: []float32{1000, 0}}}); err != nil {
		t.Fatalf("Upsert through the other handle: %v", err)
	}
	applying, goOn := make(chan struct{}), make(chan struct{})
	waiting := make(chan struct{})
	var applyOnce, waitOnce sync.Once
	s.hooks.applying = func(string) {
		applyOnce.Do(func() {
			close(applying)
			<-goOn
		})
	}
	loading, releaseOnce := holdFirstLoad(t, s)
	s.hooks.wait = func(string) { waitOnce.Do(func() { close(waiting) }) }

	wrote := make(chan error, 1)
	go func() { wrote <- s.Upsert(ctx, "v", []ports.Vector{{ID: "near", Values: []float32{-1, 0}}}) }()
	awaitClosed(t, applying, "the upsert did not come to its index in 20 s")
	searched := make(chan error, 1)
	go func() {
		got, err := s.Search(ctx, "v", []float32{-1, 0}, 2, nil)
		if err == nil && (len(got) != 2 || got[0].ID != "near" || got[1].ID != "v000") {
			t.Errorf("Search finds %+v, want near, then v000", got)
		}
		searched <- err
	}()
	// The search either begins a load, or waits for the write's turn.
	select {
	case <-loading:
	case <-waiting:
	case <-time.After(20 * time.Second):
		t.Fatal("the search neither loaded its index nor waited for it in 20 s")
	}
	close(goOn)
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatalf("Upsert: %v", err)
		}
	case <-time.After(20 * time.Second):
		releaseOnce()
		<-wrote
		t.Fatal("an upsert was answered only once a load of its index, begun as it took its change, was over")
	}
	releaseOnce()
	if err := <-searched; err != nil {
		t.Fatalf("Search: %v", err)
	}
}
