package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/abi-engine/engine/internal/sqlitedb/sqlitedbtest"
	"github.com/abi-engine/engine/ports"
)

// A put queues for the writer's turn under its caller's context.
func TestAPutWaitsForTheWritersTurnUnderItsContext(t *testing.T) {
	s := openCollection(t)
	sqlitedbtest.WriteWaitsForTheTurn(t, s.db,
		func(ctx context.Context) error {
			_, err := s.Put(ctx, "c", "d", map[string]any{"n": 1.0}, ports.Cond{})
			return err
		},
		func() bool {
			_, err := s.Get(t.Context(), "c", "d")
			return err == nil
		})
}

// A put that gave up while another write had the writer's turn never ran:
// it is not done, and may be sent again. Before, it failed with its
// context's error alone, of unknown outcome, and waited for its turn past
// the moment its answer was due.
func TestAPutThatNeverHadTheWritersTurnIsNotDone(t *testing.T) {
	s := openCollection(t)
	sqlitedbtest.AWriteThatNeverHadItsTurnIsNotDone(t, s.db,
		func(ctx context.Context) error {
			_, err := s.Put(ctx, "c", "d", map[string]any{"n": 1.0}, ports.Cond{})
			return err
		},
		func() bool {
			_, err := s.Get(t.Context(), "c", "d")
			return err == nil
		})
}

// openCollection opens a store on a file of its own, closed when the test
// ends, that holds the empty collection "c".
func openCollection(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "documents.sqlite")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.EnsureCollection(t.Context(), "c"); err != nil {
		t.Fatal(err)
	}
	return s
}

// A put that could not take the writer's connection, here because the
// store was closed, ran nothing: it is not done, and may be sent again.
// Before, it failed with a plain error, an unknown outcome.
func TestAPutThatCannotTakeTheWritersConnectionIsNotDone(t *testing.T) {
	s := openCollection(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Under a context with no deadline the put waits for the lock as long
	// as the handle stands at, so it sets no wait and fails to take the
	// connection.
	_, err := s.Put(t.Context(), "c", "d", map[string]any{"n": 1.0}, ports.Cond{})
	if !errors.Is(err, ports.ErrNotDone) {
		t.Fatalf("a put on a closed store: %v, want ports.ErrNotDone", err)
	}
	if !strings.Contains(err.Error(), "take the writer's connection") {
		t.Fatalf("a put on a closed store: %v, want it to fail taking the writer's connection", err)
	}
}
