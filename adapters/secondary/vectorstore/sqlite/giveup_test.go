package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"

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
