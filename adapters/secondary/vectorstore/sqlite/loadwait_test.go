package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/abi-engine/engine/ports"
)

// An upsert or a delete of a collection whose index the handle is loading
// returns once it is committed, without waiting for the load, which may
// take seconds for a large collection; the next search, once the load is
// over, finds what it wrote. Before, the write was committed at once but
// answered only once the whole load was over.
func TestAWriteDoesNotWaitForTheLoadOfItsCollection(t *testing.T) {
	s, stop := heldInItsLoad(t, nil)

	ctx := t.Context()
	wrote := make(chan error, 1)
	go func() {
		err := s.Upsert(ctx, "v", []ports.Vector{{ID: "near", Values: []float32{-1, 0}}})
		if err == nil {
			err = s.Delete(ctx, "v", []string{"v000"})
		}
		wrote <- err
	}()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatalf("a write during the load: %v", err)
		}
	case <-time.After(20 * time.Second):
		stop()
		<-wrote
		t.Fatal("an upsert and a delete of a collection whose index is loading were answered only once the load was over")
	}
	stop()
	got, err := s.Search(ctx, "v", []float32{-1, 0}, 2, nil)
	if err != nil {
		t.Fatalf("Search once the load is over: %v", err)
	}
	if len(got) != 2 || got[0].ID != "near" || got[1].ID != "v001" {
		t.Fatalf("Search once the load is over finds %+v, want near, then v001 (v000 deleted)", got)
	}
}

// A drop of a collection whose index the handle is loading returns once
// it is committed, without waiting for the load; the collection is gone
// for every call after it. Before, the drop was committed at once but
// answered only once the whole load was over.
func TestADropDoesNotWaitForTheLoadOfItsCollection(t *testing.T) {
	s, stop := heldInItsLoad(t, nil)

	ctx := t.Context()
	dropped := make(chan error, 1)
	go func() { dropped <- s.DeleteCollection(ctx, "v") }()
	select {
	case err := <-dropped:
		if err != nil {
			t.Fatalf("a drop during the load: %v", err)
		}
	case <-time.After(20 * time.Second):
		stop()
		<-dropped
		t.Fatal("a drop of a collection whose index is loading was answered only once the load was over")
	}
	stop()
	<-s.loaded
	if _, err := s.Search(ctx, "v", []float32{0, 0}, 1, nil); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Search of the dropped collection: %v, want ErrNotFound", err)
	}
	s.mu.Lock()
	_, held := s.indexes["v"]
	s.mu.Unlock()
	if held {
		t.Fatal("the handle holds an index of the collection it dropped")
	}
}

// A search of a collection whose index another sync is loading leaves as
// soon as its caller gives up, with the caller's error, and the load goes
// on. Before, it waited for the whole load, which for a large collection
// is seconds, whatever its caller, or an engine that stops, had said.
func TestASearchWaitingForTheLoadOfItsIndexLeavesWhenItGivesUp(t *testing.T) {
	searching := make(chan struct{})
	var once sync.Once
	// The load at open holds the index's turn; the search waits for it.
	s, stop := heldInItsLoad(t, func(string) { once.Do(func() { close(searching) }) })

	gaveUp, cancel := context.WithCancel(t.Context())
	searched := make(chan error, 1)
	go func() {
		_, err := s.Search(gaveUp, "v", []float32{0, 0}, 1, nil)
		searched <- err
	}()
	select {
	case <-searching:
	case <-time.After(20 * time.Second):
		t.Fatal("the search did not come to wait for its index in 20 s")
	}
	cancel()
	select {
	case err := <-searched:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("a search that gave up while its index loaded: %v, want context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		stop()
		<-searched
		t.Fatal("a search that gave up while its index loaded answered only once the load was over")
	}
	stop()
	got, err := s.Search(t.Context(), "v", []float32{0, 0}, 1, nil)
	if err != nil || len(got) != 1 || got[0].ID != "v000" {
		t.Fatalf("the search once the load is over finds %+v, %v; want v000", got, err)
	}
}

// heldInItsLoad opens a handle on a file holding the collection "v" (v000
// to v199 at (i, 0)), whose load at open stops in its first catch-up, and
// returns once that load holds the index of "v", with the function that
// lets the load go on (once; the test's end calls it too). wait, when not
// nil, hears every call that waits for the turn of an index.
func heldInItsLoad(t *testing.T, wait func(string)) (*Store, func()) {
	t.Helper()
	return heldInItsLoadAt(t, filepath.Join(t.TempDir(), "vectors.sqlite"), wait)
}

// heldInItsLoadAt is heldInItsLoad on a file at path.
func heldInItsLoadAt(t *testing.T, path string, wait func(string)) (*Store, func()) {
	t.Helper()
	writeCollection(t, path)
	loading, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s, err := open(t.Context(), Config{Path: path, IndexThreshold: 64}, syncHooks{wait: wait, catchUp: func(context.Context, string) {
		once.Do(func() {
			close(loading)
			<-release
		})
	}})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	stop := sync.OnceFunc(func() { close(release) })
	t.Cleanup(func() { stop(); s.Close() })
	<-loading
	return s, stop
}
