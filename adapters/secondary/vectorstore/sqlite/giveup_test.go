package sqlite

import (
	"context"
	"errors"
	"fmt"
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
	left := make(chan struct{})
	var once sync.Once
	// The catch-up goes on only once the search that began it has left.
	s.hooks.catchUp = func(context.Context, string) {
		once.Do(func() {
			cancel()
			<-left
		})
	}
	searched := make(chan error, 1)
	go func() {
		_, err := s.Search(gaveUp, "v", []float32{-1, 0}, 2, nil)
		searched <- err
	}()
	select {
	case err := <-searched:
		close(left)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("a search that gave up while catching up: %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		close(left)
		t.Fatal("a search that gave up while catching up did not leave in 30 s")
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
	loads := searchGivenUpInItsSync(t, s, []float32{0, 0}, "its collection loaded")
	ctx := t.Context()
	got, err := s.Search(ctx, "v", []float32{0, 0}, 2, nil)
	if err != nil || len(got) != 2 || got[0].ID != "v000" || got[1].ID != "v001" {
		t.Fatalf("the search after the one that gave up finds %+v, %v; want v000, then v001", got, err)
	}
	if n := loads.Load(); n != 1 {
		t.Fatalf("the collection was read into the index %d times, want once", n)
	}
}

// A search that gives up while its index catches up with writes made
// through another handle leaves the catch-up to go on: the next search
// finds the index caught up, and the writes are read once. Before, the
// catch-up ended with the search and what it had read was thrown away,
// so where callers gave up sooner than a catch-up of many writes took,
// none was ever answered.
func TestASearchThatGivesUpWhileItsIndexCatchesUpLeavesTheCatchUpToTheNext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vectors.sqlite")
	w := writeCollection(t, path) // "v": v000 to v199 at (i, 0)
	s := openLoaded(t, path)
	ctx := t.Context()
	if err := w.Upsert(ctx, "v", []ports.Vector{{ID: "near", Values: []float32{-1, 0}}}); err != nil {
		t.Fatalf("Upsert through the other handle: %v", err)
	}
	catchUps := searchGivenUpInItsSync(t, s, []float32{-1, 0}, "its index caught up")
	got, err := s.Search(ctx, "v", []float32{-1, 0}, 2, nil)
	if err != nil || len(got) != 2 || got[0].ID != "near" || got[1].ID != "v000" {
		t.Fatalf("the search after the one that gave up finds %+v, %v; want near, then v000", got, err)
	}
	if n := catchUps.Load(); n != 1 {
		t.Fatalf("the writes were read into the index %d times, want once", n)
	}
}

// A search answers while another handle goes on writing to its collection:
// a load of the writes, which reads the file as it stands then, leaves
// the index ahead of the search's snapshot, and the search, trying again
// in a newer one, catches up with what was written since in that
// snapshot, rather than start another load that the next write would
// leave ahead again, for as long as the writes went on.
func TestASearchAnswersWhileAnotherHandleGoesOnWriting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vectors.sqlite")
	w := writeCollection(t, path) // "v": v000 to v199 at (i, 0)
	s := openLoaded(t, path)
	ctx := t.Context()
	if err := w.Upsert(ctx, "v", []ports.Vector{{ID: "near", Values: []float32{-1, 0}}}); err != nil {
		t.Fatalf("Upsert through the other handle: %v", err)
	}
	// Each time a search of s has taken its snapshot, and each time s
	// reads writes into its index, the other handle writes once more, up
	// to a bound that ends the test either way.
	const most = 40
	var writes, snapshots atomic.Int32
	write := func() {
		if n := writes.Add(1); n <= most {
			if err := w.Upsert(ctx, "v", []ports.Vector{{ID: fmt.Sprintf("w%03d", n), Values: []float32{1000, float32(n)}}}); err != nil {
				t.Errorf("Upsert through the other handle: %v", err)
			}
		}
	}
	s.hooks.read = func(string) {
		snapshots.Add(1)
		write()
	}
	s.hooks.catchUp = func(context.Context, string) { write() }
	got, err := s.Search(ctx, "v", []float32{-1, 0}, 1, nil)
	if err != nil || len(got) != 1 || got[0].ID != "near" {
		t.Fatalf("Search while the other handle writes finds %+v, %v; want near", got, err)
	}
	if n := snapshots.Load(); n > 2 {
		t.Fatalf("the search took %d snapshots before it answered, want at most 2", n)
	}
}

// searchGivenUpInItsSync searches s's collection "v" for query, and gives
// the search up once s's first sync of an index (a load, or a catch-up
// with other handles' writes), which it makes wait, has begun. It
// requires the search to leave with context.Canceled while that sync
// waits, then lets the sync go on, and returns the count of syncs begun.
// what says when the search gave up, for failures.
func searchGivenUpInItsSync(t *testing.T, s *Store, query []float32, what string) *atomic.Int32 {
	t.Helper()
	began, release := make(chan struct{}), make(chan struct{})
	var syncs atomic.Int32
	// The first sync holds on until the test lets it go, or its context
	// ends, as a read of the file would.
	s.hooks.catchUp = func(ctx context.Context, _ string) {
		if syncs.Add(1) == 1 {
			close(began)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
	}
	defer close(release)
	gaveUp, cancel := context.WithCancel(t.Context())
	searched := make(chan error, 1)
	go func() {
		_, err := s.Search(gaveUp, "v", query, 1, nil)
		searched <- err
	}()
	select {
	case <-began:
	case <-time.After(30 * time.Second):
		t.Fatalf("the search did not begin to sync its index in 30 s (%s)", what)
	}
	cancel()
	select {
	case err := <-searched:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("a search that gave up while %s: %v, want context.Canceled", what, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("a search that gave up while %s did not leave in 30 s", what)
	}
	return &syncs
}
