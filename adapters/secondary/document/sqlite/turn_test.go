package sqlite

import (
	"context"
	"path/filepath"
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
