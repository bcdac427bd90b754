package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/abi-engine/engine/internal/sqlitedb/sqlitedbtest"
	"github.com/abi-engine/engine/ports"
)

// A set queues for the writer's turn under its caller's context.
func TestASetWaitsForTheWritersTurnUnderItsContext(t *testing.T) {
	s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "kv.sqlite")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	sqlitedbtest.WriteWaitsForTheTurn(t, s.db,
		func(ctx context.Context) error { return s.Set(ctx, "k", []byte("v"), 0) },
		func() bool {
			ok, err := s.Exists(t.Context(), "k")
			return err == nil && ok
		})
}

// A set that gave up while another write had the writer's turn never ran:
// it is not done, and may be sent again. Before, it failed with its
// context's error alone, of unknown outcome, and waited for its turn past
// the moment its answer was due.
func TestASetThatNeverHadTheWritersTurnIsNotDone(t *testing.T) {
	s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "kv.sqlite")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	sqlitedbtest.AWriteThatNeverHadItsTurnIsNotDone(t, s.db,
		func(ctx context.Context) error { return s.Set(ctx, "k", []byte("v"), 0) },
		func() bool {
			ok, err := s.Exists(t.Context(), "k")
			return err == nil && ok
		})
}

// A set on a closed store could take no connection, so it ran nothing: it
// is not done, and may be sent again. Before, it failed with a plain
// error, an unknown outcome.
func TestASetOnAClosedStoreIsNotDone(t *testing.T) {
	s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "kv.sqlite")})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Under a context with no deadline the set waits for the lock as long
	// as the handle stands at, so it sets no wait and fails at its
	// statement.
	err = s.Set(t.Context(), "k", []byte("v"), 0)
	if !errors.Is(err, ports.ErrNotDone) {
		t.Fatalf("a set on a closed store: %v, want ports.ErrNotDone", err)
	}
}
