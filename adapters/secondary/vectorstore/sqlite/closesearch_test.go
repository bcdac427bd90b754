package sqlite

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// A search under way as its handle closes, past its snapshot but not yet
// at the index, fails and loads no index: an index it loaded after Close
// had let go of the handle's indexes would never be closed, and its graph
// builder would go on after Close returned. Before, the search loaded the
// collection into an index of its own and answered from it.
func TestASearchUnderWayAsTheHandleClosesLoadsNoIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vectors.sqlite")
	s := openLoaded(t, path)
	// Written through another handle, the collection is in the file but
	// not in s's indexes: s's next search of it loads it whole.
	writeCollection(t, path)
	ctx := t.Context()
	reached, release := make(chan struct{}), make(chan struct{})
	s.hooks.read = func(string) {
		close(reached)
		<-release
	}
	searched := make(chan error, 1)
	go func() {
		_, err := s.Search(ctx, "v", []float32{0, 0}, 1, nil)
		searched <- err
	}()
	select {
	case <-reached:
	case <-time.After(30 * time.Second):
		t.Fatal("the search did not read the collection in 30 s")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	close(release)
	select {
	case err := <-searched:
		if err == nil {
			t.Error("a search under way as the handle closed answered from an index loaded after the close")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the search did not end in 30 s after the handle closed")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, c := range s.indexes {
		if x := c.shown.Load(); x != nil {
			t.Errorf("after Close the handle holds an index of %q (%d vectors)", name, x.Len())
		}
	}
}

// Close cuts short the load of an index that a search began, rather than
// wait for it, and the search fails, as does one waiting for the same
// index. Before, Close waited for the whole load, which for a large
// collection held up an engine's stop for seconds, up to its time limit.
func TestClosingCutsShortTheLoadOfAnIndexASearchBegan(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vectors.sqlite")
	s := openLoaded(t, path)
	// Written through another handle, the collection is in the file but
	// not in s's indexes: s's next search of it loads it whole.
	writeCollection(t, path)
	ctx := t.Context()
	loading := make(chan struct{})
	var once sync.Once
	// A load that goes on until it is told to stop, as that of a very
	// large collection would.
	s.hooks.catchUp = func(ctx context.Context, _ string) {
		once.Do(func() { close(loading) })
		<-ctx.Done()
	}
	searched := make(chan error, 2)
	search := func() {
		_, err := s.Search(ctx, "v", []float32{0, 0}, 1, nil)
		searched <- err
	}
	go search()
	select {
	case <-loading:
	case <-time.After(30 * time.Second):
		t.Fatal("the search did not begin to load the index in 30 s")
	}
	go search()
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close waited for the load of an index that a search began")
	}
	for range 2 {
		select {
		case err := <-searched:
			if err == nil {
				t.Error("a search of an index whose load Close cut short answered")
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a search did not end in 30 s after the handle closed")
		}
	}
}
