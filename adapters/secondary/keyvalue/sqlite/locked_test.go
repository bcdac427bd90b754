package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/abi-engine/engine/internal/sqlitedb/sqlitedbtest"
	"github.com/abi-engine/engine/ports"
)

// A set refused because another connection, as another engine on this
// host, held the file's write lock past the busy timeout changed nothing,
// and says so (ports.ErrNotDone), which the API answers 503 with
// Retry-After. Before, it was a 500, as a write that may have landed.
func TestASetRefusedForTheFilesLockIsNotDone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.sqlite")
	s, err := Open(t.Context(), Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	sqlitedbtest.LockedFileRefusesWrites(t, s.db.Write, path,
		func() error { return s.Set(t.Context(), "k", []byte("v"), 0) },
		func() bool {
			ok, err := s.Exists(t.Context(), "k")
			return err == nil && ok
		})
}

// The first set of a new term raises the fence, then sets: two waits for
// the file's lock. The set's statement may wait only for what the raise
// left of the call's wait: the writer's busy timeout when it runs is less
// than the wait the call had when the raise began, and no more than what
// is left until the answer is due once the raise is done; and no less than
// that wait less the whole time the set took, so that the set still waits
// for what the raise left. What is checked is the wait the statement is
// given, not how long anything took, so a slow machine cannot make the
// test fail.
func TestASetAfterARaiseWaitsOnlyForWhatTheRaiseLeft(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.sqlite")
	s, err := Open(t.Context(), Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	due := time.Now().Add(5 * time.Second)
	var whole int64
	var raised time.Time
	// The raise spends a second, as it would waiting for the lock.
	s.raising = func() {
		if err := s.db.Write.QueryRowContext(t.Context(), "PRAGMA busy_timeout").Scan(&whole); err != nil {
			t.Error(err)
		}
		<-time.After(time.Second)
		raised = time.Now()
	}
	began := time.Now()
	if err := s.Set(ports.WithAnswerBy(ports.WithFencingToken(t.Context(), 1), due), "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	var left int64
	if err := s.db.Write.QueryRowContext(t.Context(), "PRAGMA busy_timeout").Scan(&left); err != nil {
		t.Fatal(err)
	}
	// The statement's wait is the whole less the time the raise spent, in
	// whole milliseconds, so it may round up by one, or down by one.
	bound := max(0, due.Sub(raised).Milliseconds()) + 1
	floor := whole - took.Milliseconds() - 1
	if left >= whole || left > bound || left < floor {
		t.Fatalf("the set's statement waited up to %d ms for the lock after a raise that spent a second of a %d ms wait, in a set that took %v, want less than %d, at most %d (until the answer is due) and at least %d (the wait less the set's time)", left, whole, took, whole, bound, floor)
	}
}

// The first get of a new term raises the fence, a write that waits for the
// file's lock. With another connection holding the lock, the get gives up
// the raise by the moment its answer is due, and answers uncached while its
// caller still waits, rather than after the writer's whole wait.
func TestAGetThatRaisesTheFenceAnswersByItsDueMoment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.sqlite")
	s, err := Open(t.Context(), Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Set(t.Context(), "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	sqlitedbtest.HoldWriteLock(t, path)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	v, err := s.Get(ports.WithAnswerBy(ports.WithFencingToken(ctx, 1), time.Now().Add(time.Second)), "k")
	if err != nil || string(v) != "v" || ctx.Err() != nil {
		t.Fatalf("a get under a new term, the lock held: %q, %v (its caller's context: %v), want \"v\" while the caller waits", v, err, ctx.Err())
	}
}

// A get's raise of the fence is a write, and takes the writers' turn: a set
// that comes while it waits for the lock another connection holds is told,
// by the moment its own answer is due, that it was not done, rather than
// waiting for the writer connection until the get's raise gives up.
func TestASetBehindAGetsRaiseIsNotDoneByItsDueMoment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.sqlite")
	s, err := Open(t.Context(), Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	sqlitedbtest.HoldWriteLock(t, path)
	gctx, gcancel := context.WithTimeout(t.Context(), 8*time.Second)
	defer gcancel()
	got := make(chan error, 1)
	go func() {
		_, err := s.Get(ports.WithAnswerBy(ports.WithFencingToken(gctx, 1), time.Now().Add(3*time.Second)), "k")
		got <- err
	}()
	// The get's raise is under way once it holds the writer connection.
	for s.db.Write.Stats().InUse == 0 {
		select {
		case err := <-got:
			t.Fatalf("the get returned before it raised the fence: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
	defer cancel()
	err = s.Set(ports.WithAnswerBy(ports.WithFencingToken(ctx, 1), time.Now().Add(time.Second)), "k", []byte("v"), 0)
	if !errors.Is(err, ports.ErrNotDone) || ctx.Err() != nil {
		t.Fatalf("a set behind a get's raise, the lock held: %v (its caller's context: %v), want ports.ErrNotDone while the caller waits", err, ctx.Err())
	}
	<-got
}

// A set of a new term whose raise of the fence is done, but whose own wait
// for the lock then cannot be set (here the writer has been closed), never
// ran its statement: it was not done (ports.ErrNotDone), which the API
// answers 503, not a 500 as a write that may have landed.
func TestASetWhoseWaitCannotBeSetAfterARaiseIsNotDone(t *testing.T) {
	s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "kv.sqlite")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	// The raise spends a measurable time, so the wait must be set anew.
	s.raising = func() {
		<-time.After(5 * time.Millisecond)
		_ = s.db.Write.Close()
	}
	err = s.Set(ports.WithFencingToken(t.Context(), 1), "k", []byte("v"), 0)
	if !errors.Is(err, ports.ErrNotDone) {
		t.Fatalf("a set whose wait could not be set after its raise: %v, want ports.ErrNotDone", err)
	}
}
