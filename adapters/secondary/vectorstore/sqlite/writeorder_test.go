package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/abi-engine/engine/internal/sqlitedb/sqlitedbtest"
	"github.com/abi-engine/engine/ports"
)

// An upsert that waits for the file's lock, which another engine on the
// host holds, writes before the upserts of its handle that came after it.
// Before, each write of a handle waited on a connection of its own in
// SQLite's busy handler, which polls up to 100 ms apart and serves no one
// in turn: the writes that came later, polling sooner, took the lock one
// after another, and the first waited for as long as they kept coming (a
// contract test under load saw one wait its whole 10 s).
func TestAnUpsertWaitingForTheFilesLockGoesBeforeTheHandlesLaterWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vectors.sqlite")
	s := openLoaded(t, path)
	ctx := t.Context()
	err := s.CreateCollection(ctx, "v", 2, ports.MetricEuclid)
	if err != nil {
		t.Fatalf("CreateCollection: %v", err)
	}
	const later, each = 8, 5
	// Each write finds a connection open, so a write that has come is at
	// the file's lock at once.
	s.db.SetMaxIdleConns(1 + later)
	conns := make([]*sql.Conn, 1+later)
	for i := range conns {
		if conns[i], err = s.db.Conn(ctx); err != nil {
			t.Fatalf("open a connection: %v", err)
		}
	}
	for _, c := range conns {
		c.Close()
	}
	// The other engine holds the file's write lock.
	release := sqlitedbtest.HoldWriteLock(t, path)

	arrived := make(chan struct{}, 1+later*each)
	s.hooks.writing = func() { arrived <- struct{}{} }
	// The first upsert to come to the file's lock stops there until the
	// later ones have come, so that the setup takes none of the time it
	// may wait for the lock (sqlitedb.BusyTimeout, 10 s), however loaded the
	// machine.
	atLock, goOn := make(chan struct{}), make(chan struct{})
	var locked atomic.Bool
	s.hooks.locking = func() {
		if locked.CompareAndSwap(false, true) {
			close(atLock)
			<-goOn
		}
	}
	var wg sync.WaitGroup
	upsert := func(id string) {
		if err := s.Upsert(ctx, "v", []ports.Vector{{ID: id, Values: []float32{1, 2}}}); err != nil {
			t.Errorf("Upsert %s: %v", id, err)
		}
	}
	wg.Go(func() { upsert("first") })
	select {
	case <-atLock:
	case <-time.After(20 * time.Second):
		t.Fatal("the first upsert did not come to the file's lock in 20 s")
	}
	for w := range later {
		wg.Go(func() {
			for i := range each {
				upsert(fmt.Sprintf("later-%d-%d", w, i))
			}
		})
	}
	awaitArrivals(t, arrived, 1+later)
	close(goOn)
	release()
	wg.Wait()

	var firstWritten string
	if err := s.db.QueryRowContext(ctx, `SELECT id FROM vectors WHERE collection = 'v' ORDER BY version LIMIT 1`).Scan(&firstWritten); err != nil {
		t.Fatalf("read the first upsert written: %v", err)
	}
	if firstWritten != "first" {
		t.Fatalf("%s was written first, before the upsert that had waited for the file's lock before it came", firstWritten)
	}
}

// awaitArrivals waits for n writes to come to the handle.
func awaitArrivals(t *testing.T, arrived <-chan struct{}, n int) {
	t.Helper()
	for range n {
		select {
		case <-arrived:
		case <-time.After(20 * time.Second):
			t.Fatalf("%d writes did not come to the handle in 20 s", n)
		}
	}
}

// A write queued behind one that waits for the file's lock is told that it
// was not done when its own answer is due, as the one at the lock is.
// Before, it waited for its turn until its context ended and failed with
// the context's error alone, of unknown outcome, though it never ran.
func TestAnUpsertQueuedBehindOneAtTheFilesLockIsNotDoneWhenItsAnswerIsDue(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vectors.sqlite")
	s := openLoaded(t, path)
	if err := s.CreateCollection(t.Context(), "v", 2, ports.MetricEuclid); err != nil {
		t.Fatalf("CreateCollection: %v", err)
	}
	release := sqlitedbtest.HoldWriteLock(t, path)
	first := make(chan error, 1)
	go func() {
		first <- s.Upsert(context.Background(), "v", []ports.Vector{{ID: "first", Values: []float32{1, 0}}})
	}()
	deadline := time.Now().Add(20 * time.Second)
	for len(s.writes) == 0 { // the first upsert has its turn, and waits at the lock
		if time.Now().After(deadline) {
			t.Fatal("the first upsert never took its turn")
		}
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := s.Upsert(ports.WithAnswerBy(ctx, time.Now().Add(300*time.Millisecond)), "v", []ports.Vector{{ID: "queued", Values: []float32{0, 1}}})
	if !errors.Is(err, ports.ErrNotDone) {
		t.Fatalf("an upsert queued behind one at the lock: %v, want ErrNotDone", err)
	}
	select {
	case err := <-first:
		t.Fatalf("the first upsert ended (%v) while the lock was held", err)
	default:
	}
	release()
	if err := <-first; err != nil {
		t.Fatalf("the first upsert, once the lock was let go: %v", err)
	}
	if _, err := s.Get(t.Context(), "v", "queued"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Get of the upsert told not done: %v, want ErrNotFound", err)
	}
}
