package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/abi-engine/engine/ports"
)

// Collections answers while the index of a collection loads. It read how
// much of each index was built under the lock that a load holds for as
// long as it reads the collection, so a listing waited for the load of a
// large collection (seconds at a few hundred thousand vectors), which an
// engine makes at every open.
func TestCollectionsAnswersWhileAnIndexLoads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vectors.sqlite")
	s := openLoaded(t, path)
	// Written through another handle, the collection is in the file but
	// not in s's indexes: s's next search of it loads it whole.
	w := openLoaded(t, path)
	ctx := t.Context()
	if err := w.CreateCollection(ctx, "v", 2, ports.MetricDot); err != nil {
		t.Fatalf("CreateCollection: %v", err)
	}
	if err := w.Upsert(ctx, "v", []ports.Vector{{ID: "a", Values: []float32{1, 0}}}); err != nil {
		t.Fatalf("Upsert: %v", err)
	}
	loading, release := make(chan struct{}), make(chan struct{})
	s.hooks.catchUp = func(context.Context, string) {
		close(loading)
		<-release
	}
	searched := make(chan error, 1)
	go func() {
		_, err := s.Search(ctx, "v", []float32{1, 0}, 1, nil)
		searched <- err
	}()
	<-loading
	listed := make(chan error, 1)
	go func() {
		cs, err := s.Collections(ctx)
		if err == nil && (len(cs) != 1 || cs[0].Name != "v") {
			err = fmt.Errorf("listed %+v, want v alone", cs)
		}
		listed <- err
	}()
	select {
	case err := <-listed:
		if err != nil {
			t.Errorf("Collections while an index loads: %v", err)
		}
		close(release)
	case <-time.After(20 * time.Second):
		close(release)
		t.Errorf("Collections did not answer within 20 s while the index of a collection loaded")
		<-listed
	}
	if err := <-searched; err != nil {
		t.Errorf("the search that loaded the index: %v", err)
	}
}

// A search of a name that is no collection is refused as not found, and
// leaves neither an entry in the handle's indexes nor a count of a drop,
// which would send every search under way to try again in a new snapshot.
func TestASearchOfNoCollectionLeavesTheOtherSearchesAlone(t *testing.T) {
	s := openLoaded(t, filepath.Join(t.TempDir(), "vectors.sqlite"))
	drops := s.dropCount()
	for range 3 {
		if _, err := s.Search(t.Context(), "nothing", []float32{0, 0}, 1, nil); !errors.Is(err, ports.ErrNotFound) {
			t.Fatalf("Search of no collection: %v, want ErrNotFound", err)
		}
	}
	if n := s.dropCount(); n != drops {
		t.Errorf("searches of no collection counted %d drops", n-drops)
	}
	s.mu.Lock()
	_, held := s.indexes["nothing"]
	s.mu.Unlock()
	if held {
		t.Error("a search of no collection left an entry in the handle's indexes")
	}
}
