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
	path, s, w := openBehind(t)
	snapped, goOn := make(chan struct{}), make(chan struct{})
	var readOnce sync.Once
	s.hooks.read = func(string) {
		readOnce.Do(func() {
			close(snapped)
			<-goOn
		})
	}
	loading, releaseOnce := holdFirstLoad(t, s)

	searched := make(chan error, 1)
	go searchNearest(t, s, searched)
	awaitClosed(t, snapped, "the search did not read the collection in 20 s")
	// Written after the search's first snapshot, before the load's.
	writeNearer(t, w)
	close(goOn)
	awaitClosed(t, loading, "the search did not begin to load its index in 20 s")
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

// openBehind opens a store on a new file, then writes the collection "v",
// v000 to v199 at (i, 0), through another handle, w: the collection is in
// the file but not in s's indexes, so s's next search of it loads it
// whole. It returns the file's path too.
func openBehind(t *testing.T) (path string, s, w *Store) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "vectors.sqlite")
	s = openLoaded(t, path)
	w = writeCollection(t, path)
	return path, s, w
}

// searchNearest searches s's collection "v" for the one vector nearest to
// (-1, 0), which writeNearer wrote as w01, and sends searched the error
// of the search; it fails the test if the search finds another.
func searchNearest(t *testing.T, s *Store, searched chan<- error) {
	got, err := s.Search(t.Context(), "v", []float32{-1, 0}, 1, nil)
	if err == nil && (len(got) != 1 || got[0].ID != "w01") {
		t.Errorf("Search finds %+v, want w01", got)
	}
	searched <- err
}

// holdFirstLoad makes the first load of an index of s hold on, as a long
// read of the file would, until release is called or its context ends;
// loading is closed once that load has begun. The test's end releases it
// too.
func holdFirstLoad(t *testing.T, s *Store) (loading <-chan struct{}, release func()) {
	t.Helper()
	began, released := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s.hooks.catchUp = func(ctx context.Context, _ string) {
		once.Do(func() {
			close(began)
			select {
			case <-released:
			case <-ctx.Done():
			}
		})
	}
	release = sync.OnceFunc(func() { close(released) })
	t.Cleanup(release)
	return began, release
}

// writeNearer upserts through w, into the collection "v", w00 to w19 at
// (-i, 0): nearer to (-1, 0) than any vector writeCollection wrote.
func writeNearer(t *testing.T, w *Store) {
	t.Helper()
	for i := range 20 {
		if err := w.Upsert(t.Context(), "v", []ports.Vector{{ID: fmt.Sprintf("w%02d", i), Values: []float32{-float32(i), 0}}}); err != nil {
			t.Fatalf("Upsert through the other handle: %v", err)
		}
	}
}

// awaitClosed waits up to 20 s for ch to be closed, and fails the test
// with failure if it is not.
func awaitClosed(t *testing.T, ch <-chan struct{}, failure string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatal(failure)
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
	path, s, w := openBehind(t)
	snapped, goOn := make(chan struct{}), make(chan struct{})
	var reads atomic.Int32
	// The first search pauses once it has its snapshot; the second goes
	// on, and its load holds the index's turn.
	s.hooks.read = func(string) {
		if reads.Add(1) == 1 {
			close(snapped)
			<-goOn
		}
	}
	loading, releaseOnce := holdFirstLoad(t, s)
	waiting := make(chan struct{})
	var waitOnce sync.Once
	s.hooks.wait = func(string) { waitOnce.Do(func() { close(waiting) }) }

	searched := make(chan error, 2)
	go searchNearest(t, s, searched)
	awaitClosed(t, snapped, "the first search did not read the collection in 20 s")
	writeNearer(t, w)
	go searchNearest(t, s, searched)
	awaitClosed(t, loading, "the second search did not begin to load the index in 20 s")
	close(goOn)
	awaitClosed(t, waiting, "the first search did not come to wait for the index's turn in 20 s")
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
