package sqlite

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/abi-engine/engine/ports"
)

// A collection made anew, under the name of one another handle dropped
// while this handle was loading it, is answered once committed, without
// waiting for the load of the one that went; searches and writes through
// the handle then find the new collection, not what the old load read.
// Before, the create waited for the whole load, which for a large
// collection is seconds.
func TestACreateDoesNotWaitForTheLoadOfADroppedCollectionOfTheSameName(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vectors.sqlite")
	s, stop := heldInItsLoadAt(t, path, nil) // "v": 200 vectors of dimension 2, its load held
	other := openLoaded(t, path)
	ctx := t.Context()
	if err := other.DeleteCollection(ctx, "v"); err != nil {
		t.Fatalf("DeleteCollection through the other handle: %v", err)
	}
	created := make(chan error, 1)
	go func() { created <- s.CreateCollection(ctx, "v", 3, ports.MetricCosine) }()
	select {
	case err := <-created:
		if err != nil {
			t.Fatalf("CreateCollection while the load of the dropped one is held: %v", err)
		}
	case <-time.After(20 * time.Second):
		stop()
		<-created
		t.Fatal("a create of a collection was answered only once the load of a dropped collection of the same name was over")
	}
	if err := s.Upsert(ctx, "v", []ports.Vector{{ID: "new", Values: []float32{0, 0, 1}}}); err != nil {
		t.Fatalf("Upsert into the new collection: %v", err)
	}
	stop()
	got, err := s.Search(ctx, "v", []float32{0, 0, 1}, 5, nil)
	if err != nil {
		t.Fatalf("Search of the new collection: %v", err)
	}
	if len(got) != 1 || got[0].ID != "new" {
		t.Fatalf("Search of the new collection finds %+v, want only new", got)
	}
}
