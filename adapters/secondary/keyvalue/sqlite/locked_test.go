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
// host, held the file's write lock until its answer was due changed nothing,
// and says so (ports.ErrNotDone), which the API answers 503 with
// Retry-After. Before, it was a 500, as a write that may have landed.
func TestASetRefusedForTheFilesLockIsNotDone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.sqlite")
	s, err := Open(t.Context(), Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	sqlitedbtest.LockedFileRefusesWrites(t, path,
		func(ctx context.Context) error { return s.Set(ctx, "k", []byte("v"), 0) },
		func() bool {
			ok, err := s.Exists(t.Context(), "k")
			return err == nil && ok
		})
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
