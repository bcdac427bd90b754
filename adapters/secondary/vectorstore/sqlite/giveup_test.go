package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/abi-engine/engine/ports"
)

// A search that gives up while it catches its index up with writes made
// through another handle leaves the index as it stood, graph and all, for
// the next search to catch up from. Before, the index was dropped, and the
// next search loaded the whole collection from the file and built its
// graph anew, which for a large collection takes minutes of searches
// scored exactly: one caller hanging up cost every other.
func TestASearchThatGivesUpWhileCatchingUpKeepsTheIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vectors.sqlite")
	w := writeCollection(t, path) // "v": v000 to v199 at (i, 0), above the threshold of 64
	s := openLoaded(t, path)
	ctx := t.Context()
	if _, err := s.Search(ctx, "v", []float32{0, 0}, 1, nil); err != nil {
		t.Fatalf("Search: %v", err)
	}
	s.mu.Lock()
	c := s.indexes["v"]
	s.mu.Unlock()
	c.mu.RLock()
	held := c.index
	c.mu.RUnlock()
	if held == nil {
		t.Fatal("the handle holds no index of v after a search")
	}

	if err := w.Upsert(ctx, "v", []ports.Vector{{ID: "near", Values: []float32{-1, 0}}}); err != nil {
		t.Fatalf("Upsert through the other handle: %v", err)
	}
	if err := w.Delete(ctx, "v", []string{"v000"}); err != nil {
		t.Fatalf("Delete through the other handle: %v", err)
	}
	gaveUp, cancel := context.WithCancel(ctx)
	var once sync.Once
	s.hooks.catchUp = func(context.Context, string) { once.Do(cancel) }
	if _, err := s.Search(gaveUp, "v", []float32{-1, 0}, 2, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("a search that gave up while catching up: %v, want context.Canceled", err)
	}
	c.mu.RLock()
	kept := c.index
	c.mu.RUnlock()
	if kept != held {
		t.Fatal("the search that gave up while catching up dropped the index")
	}
	got, err := s.Search(ctx, "v", []float32{-1, 0}, 2, nil)
	if err != nil {
		t.Fatalf("the search after the one that gave up: %v", err)
	}
	if len(got) != 2 || got[0].ID != "near" || got[1].ID != "v001" {
		t.Fatalf("the search after the one that gave up finds %+v, want near, then v001 (v000 deleted)", got)
	}
	c.mu.RLock()
	kept = c.index
	c.mu.RUnlock()
	if kept != held {
		t.Fatal("the search after the one that gave up loaded the index anew rather than catch it up")
	}
}

// A search that gives up while the collection it searches is read whole
// into its index leaves the load to go on: the next search finds the
// collection loaded, and the file is read once. Before, the load ended
// with the search and dropped what it had read, and the next search read
// the whole collection again: where every caller gives up sooner than a
// large collection loads, no search of it ever answered.
func TestASearchThatGivesUpWhileItsCollectionLoadsLeavesTheLoadToTheNext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vectors.sqlite")
	s := openLoaded(t, path)
	// Written through another handle, the collection is in the file but
	// not in s's indexes: s's next search of it loads it whole.
	writeCollection(t, path) // "v": v000 to v199 at (i, 0)
	ctx := t.Context()
	loading, release := make(chan struct{}), make(chan struct{})
	var loads atomic.Int32
	// The first load holds on until the test lets it go, or its context
	// ends, as a read of the file would.
	s.hooks.catchUp = func(ctx context.Context, _ string) {
		if loads.Add(1) == 1 {
			close(loading)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
	}
	gaveUp, cancel := context.WithCancel(ctx)
	searched := make(chan error, 1)
	go func() {
		_, err := s.Search(gaveUp, "v", []float32{0, 0}, 1, nil)
		searched <- err
	}()
	select {
	case <-loading:
	case <-time.After(30 * time.Second):
		t.Fatal("the search did not begin to load the collection in 30 s")
	}
	cancel()
	select {
	case err := <-searched:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("a search that gave up while its collection loaded: %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		close(release)
		t.Fatal("a search that gave up while its collection loaded did not leave in 30 s")
	}
	close(release)
	got, err := s.Search(ctx, "v", []float32{0, 0}, 2, nil)
	if err != nil || len(got) != 2 || got[0].ID != "v000" || got[1].ID != "v001" {
		t.Fatalf("the search after the one that gave up finds %+v, %v; want v000, then v001", got, err)
	}
	if n := loads.Load(); n != 1 {
		t.Fatalf("the collection was read into the index %d times, want once", n)
	}
}
