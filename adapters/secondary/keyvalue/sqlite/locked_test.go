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
// the file's lock. When the raise has used up the wait the call allows,
// and another connection then holds the lock, the set is told it was not
// done by the moment its answer is due, while its caller still waits,
// rather than after a second whole wait.
func TestASetAfterARaiseWaitsOnlyForWhatTheRaiseLeft(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.sqlite")
	s, err := Open(t.Context(), Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	due := time.Now().Add(2 * time.Second)
	// The raise takes the lock, and gives it up when the answer is due, to
	// another connection that then holds it.
	s.raising = func() {
		sqlitedbtest.HoldWriteLock(t, path)
		<-time.After(time.Until(due))
	}
	err = s.Set(ports.WithAnswerBy(ports.WithFencingToken(ctx, 1), due), "k", []byte("v"), 0)
	if !errors.Is(err, ports.ErrNotDone) || ctx.Err() != nil {
		t.Fatalf("a set whose raise used up its wait, the lock held: %v (its caller's context: %v), want ports.ErrNotDone while the caller waits", err, ctx.Err())
	}
}
