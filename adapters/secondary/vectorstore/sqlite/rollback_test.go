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

// A write whose ROLLBACK failed does not leave its connection in the pool
// inside its transaction, holding the file's write lock: the connection is
// closed, and the next write begins on a fresh one. Before, it went back to
// the pool, and the next write given it failed to begin.
func TestAnUpsertWhoseRollbackFailedLeavesNoConnectionInItsTransaction(t *testing.T) {
	s := openLoaded(t, filepath.Join(t.TempDir(), "vectors.sqlite"))
	if err := s.CreateCollection(t.Context(), "v", 2, ports.MetricEuclid); err != nil {
		t.Fatalf("CreateCollection: %v", err)
	}
	// database/sql gives a write the connection last given back, so the
	// write after is given the one that refused the rollback, if it is kept.
	sqlitedbtest.RefuseRollbacks(t, s.db)
	err := s.Upsert(t.Context(), "missing", []ports.Vector{{ID: "a", Values: []float32{1, 0}}})
	if !errors.Is(err, ports.ErrNotFound) || errors.Is(err, ports.ErrNotDone) {
		t.Fatalf("an upsert into a missing collection whose rollback failed: %v, want ErrNotFound, never ErrNotDone", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := s.Upsert(ctx, "v", []ports.Vector{{ID: "b", Values: []float32{0, 1}}}); err != nil {
		t.Fatalf("the next upsert: %v", err)
	}
}
