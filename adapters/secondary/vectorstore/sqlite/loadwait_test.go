package sqlite

import (
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
	path := filepath.Join(t.TempDir(), "vectors.sqlite")
	writeCollection(t, path) // "v": v000 to v199 at (i, 0)
	loading, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s, err := open(t.Context(), Config{Path: path, IndexThreshold: 64}, syncHooks{catchUp: func(string) {
		once.Do(func() {
			close(loading)
			<-release
		})
	}})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	var releaseOnce sync.Once
	stop := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(func() { stop(); s.Close() })
	<-loading // the load at open holds the index of "v"

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
	path := filepath.Join(t.TempDir(), "vectors.sqlite")
	writeCollection(t, path) // "v": v000 to v199 at (i, 0)
	loading, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s, err := open(t.Context(), Config{Path: path, IndexThreshold: 64}, syncHooks{catchUp: func(string) {
		once.Do(func() {
			close(loading)
			<-release
		})
	}})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	var releaseOnce sync.Once
	stop := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(func() { stop(); s.Close() })
	<-loading // the load at open holds the index of "v"

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
