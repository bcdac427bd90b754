package sqlite

import (
	"path/filepath"
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
