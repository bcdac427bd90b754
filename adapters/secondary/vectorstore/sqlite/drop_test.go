package sqlite

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/abi-engine/engine/ports"
)

// A search whose snapshot of the file still holds a collection that the
// handle drops meanwhile leaves no index of that collection behind. Its
// load ran after the drop had let go of the handle's index (or found none
// to let go of), and made the index anew from the snapshot: the whole
// dropped collection, with a graph builder above the threshold, held until
// the handle closed unless some later call named the collection again.
func TestASearchRacingADropLeavesNoIndexOfTheDroppedCollection(t *testing.T) {
	for _, tc := range []struct {
		name string
		held bool // the handle holds an index of the collection when the search starts
	}{
		{"IndexHeld", true},
		{"NoIndexHeld", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "vectors.sqlite")
			s := openLoaded(t, path)
			// Written through another handle, the collection is in the
			// file but not in s's indexes, which loaded at open.
			w := s
			if !tc.held {
				w = openLoaded(t, path)
			}
			ctx := t.Context()
			if err := w.CreateCollection(ctx, "v", 4, ports.MetricEuclid); err != nil {
				t.Fatalf("CreateCollection: %v", err)
			}
			vs := make([]ports.Vector, 200)
			for i := range vs {
				n := float32(i)
				vs[i] = ports.Vector{ID: fmt.Sprintf("v%03d", i), Values: []float32{n, -n, n / 2, 1}}
			}
			if err := w.Upsert(ctx, "v", vs); err != nil {
				t.Fatalf("Upsert: %v", err)
			}
			var once sync.Once
			s.hooks.read = func(name string) {
				once.Do(func() {
					if err := s.DeleteCollection(ctx, name); err != nil {
						t.Errorf("DeleteCollection while a search holds its snapshot: %v", err)
					}
				})
			}
			got, err := s.Search(ctx, "v", []float32{0, 0, 0, 1}, 3, nil)
			if err != nil && !errors.Is(err, ports.ErrNotFound) {
				t.Fatalf("Search racing the drop: %v", err)
			}
			if err == nil && len(got) != 3 {
				t.Fatalf("Search racing the drop found %d vectors, want 3 (before the drop) or ErrNotFound (after it)", len(got))
			}
			s.mu.Lock()
			_, held := s.indexes["v"]
			s.mu.Unlock()
			if held {
				t.Errorf("the handle holds an index of the collection it dropped")
			}
		})
	}
}

// openLoaded opens a handle on path once the load of its indexes at open
// is over, so that only the test's own calls load indexes.
func openLoaded(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(t.Context(), Config{Path: path, IndexThreshold: 64})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	<-s.loaded
	return s
}

// writeCollection writes collection "v" into the file at path through a
// handle of its own, which it returns: 200 vectors, v000 to v199, each
// (i, 0), more than the threshold openLoaded sets, so an index of the
// collection builds a graph.
func writeCollection(t *testing.T, path string) *Store {
	t.Helper()
	w := openLoaded(t, path)
	if err := w.CreateCollection(t.Context(), "v", 2, ports.MetricEuclid); err != nil {
		t.Fatalf("CreateCollection: %v", err)
	}
	vs := make([]ports.Vector, 200)
	for i := range vs {
		vs[i] = ports.Vector{ID: fmt.Sprintf("v%03d", i), Values: []float32{float32(i), 0}}
	}
	if err := w.Upsert(t.Context(), "v", vs); err != nil {
		t.Fatalf("Upsert: %v", err)
	}
	return w
}
