package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/abi-engine/engine/ports"
)

// A search waiting for the load of its index holds no snapshot of the
// file meanwhile, so the checkpoint copies into the database everything
// written before the load began, and the log can be reset once the load
// is over. Before, the search waited inside the snapshot it had taken
// before the load, which kept every page written since in the log: under
// steady searches of a collection another handle writes to, each waiting
// for a load or for its turn at the index, the log was never reset and
// grew without bound.
func TestASearchWaitingForTheLoadOfItsIndexHoldsBackNoCheckpoint(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vectors.sqlite")
	s := openLoaded(t, path)
	// Written through another handle, the collection is in the file but
	// not in s's indexes: s's next search of it loads it whole.
	w := writeCollection(t, path) // "v": v000 to v199 at (i, 0)
	ctx := t.Context()
	snapped, goOn := make(chan struct{}), make(chan struct{})
	loading, release := make(chan struct{}), make(chan struct{})
	var readOnce, loadOnce sync.Once
	s.hooks.read = func(string) {
		readOnce.Do(func() {
			close(snapped)
			<-goOn
		})
	}
	s.hooks.catchUp = func(ctx context.Context, _ string) {
		loadOnce.Do(func() {
			close(loading)
			select {
			case <-release:
			case <-ctx.Done():
			}
		})
	}
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce)

	searched := make(chan error, 1)
	go func() {
		got, err := s.Search(ctx, "v", []float32{-1, 0}, 1, nil)
		if err == nil && (len(got) != 1 || got[0].ID != "w01") {
			t.Errorf("Search finds %+v, want w01", got)
		}
		searched <- err
	}()
	select {
	case <-snapped:
	case <-time.After(20 * time.Second):
		t.Fatal("the search did not read the collection in 20 s")
	}
	// Written after the search's first snapshot, before the load's.
	for i := range 20 {
		if err := w.Upsert(ctx, "v", []ports.Vector{{ID: fmt.Sprintf("w%02d", i), Values: []float32{-float32(i), 0}}}); err != nil {
			t.Fatalf("Upsert through the other handle: %v", err)
		}
	}
	close(goOn)
	select {
	case <-loading:
	case <-time.After(20 * time.Second):
		t.Fatal("the search did not begin to load its index in 20 s")
	}
	if log, copied := checkpointWithin(t, path, 20*time.Second); copied < log {
		t.Errorf("while a search waited for the load of its index, a checkpoint copied %d of the log's %d pages", copied, log)
	}
	releaseOnce()
	select {
	case err := <-searched:
		if err != nil {
			t.Fatalf("Search: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the search did not answer in 20 s once the load was over")
	}
}

// checkpointWithin checkpoints the file at path, on a connection of its
// own, until a checkpoint copies the whole log or within has passed, and
// returns the pages in the log and those copied by then.
func checkpointWithin(t *testing.T, path string, within time.Duration) (log, copied int) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer db.Close()
	deadline := time.Now().Add(within)
	for {
		var busy int
		if err := db.QueryRowContext(t.Context(), `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &log, &copied); err != nil {
			t.Fatalf("checkpoint: %v", err)
		}
		// busy is a checkpoint that could not run, the handles' own
		// checkpointers running one: it copied nothing, and says -1 of -1.
		if busy == 0 && copied >= log || time.Now().After(deadline) {
			return log, copied
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A search that finds its index's turn taken by a load another search
// began after its snapshot gives that snapshot up while it waits, so the
// checkpoint copies everything written before the load began. Before, it
// waited for the turn inside its older snapshot.
func TestASearchWaitingForItsTurnAtTheIndexHoldsBackNoCheckpoint(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vectors.sqlite")
	s := openLoaded(t, path)
	// Written through another handle, the collection is in the file but
	// not in s's indexes: s's next search of it loads it whole.
	w := writeCollection(t, path) // "v": v000 to v199 at (i, 0)
	ctx := t.Context()
	snapped, goOn := make(chan struct{}), make(chan struct{})
	loading, release := make(chan struct{}), make(chan struct{})
	var reads atomic.Int32
	var loadOnce sync.Once
	// The first search pauses once it has its snapshot; the second goes
	// on, and its load holds the index's turn.
	s.hooks.read = func(string) {
		if reads.Add(1) == 1 {
			close(snapped)
			<-goOn
		}
	}
	s.hooks.catchUp = func(ctx context.Context, _ string) {
		loadOnce.Do(func() {
			close(loading)
			select {
			case <-release:
			case <-ctx.Done():
			}
		})
	}
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce)
	waiting := make(chan struct{})
	var waitOnce sync.Once
	s.hooks.wait = func(string) { waitOnce.Do(func() { close(waiting) }) }

	searched := make(chan error, 2)
	search := func() {
		got, err := s.Search(ctx, "v", []float32{-1, 0}, 1, nil)
		if err == nil && (len(got) != 1 || got[0].ID != "w01") {
			t.Errorf("Search finds %+v, want w01", got)
		}
		searched <- err
	}
	go search()
	select {
	case <-snapped:
	case <-time.After(20 * time.Second):
		t.Fatal("the first search did not read the collection in 20 s")
	}
	for i := range 20 {
		if err := w.Upsert(ctx, "v", []ports.Vector{{ID: fmt.Sprintf("w%02d", i), Values: []float32{-float32(i), 0}}}); err != nil {
			t.Fatalf("Upsert through the other handle: %v", err)
		}
	}
	go search()
	select {
	case <-loading:
	case <-time.After(20 * time.Second):
		t.Fatal("the second search did not begin to load the index in 20 s")
	}
	close(goOn)
	select {
	case <-waiting:
	case <-time.After(20 * time.Second):
		t.Fatal("the first search did not come to wait for the index's turn in 20 s")
	}
	if log, copied := checkpointWithin(t, path, 20*time.Second); copied < log {
		t.Errorf("while a search waited for its turn at the index, a checkpoint copied %d of the log's %d pages", copied, log)
	}
	releaseOnce()
	for range 2 {
		select {
		case err := <-searched:
			if err != nil {
				t.Fatalf("Search: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a search did not answer in 20 s once the load was over")
		}
	}
}
