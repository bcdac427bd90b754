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

// A search whose read transaction's ROLLBACK failed does not leave its
// connection in the pool inside its snapshot: the connection is closed, so
// the writes after it begin and the reads after it see them. Before, the
// connection went back to the pool still in the snapshot, where a write
// could not begin and a read answered from the file as it stood then.
func TestASearchWhoseRollbackFailedLeavesNoConnectionInItsSnapshot(t *testing.T) {
	s := openLoaded(t, filepath.Join(t.TempDir(), "vectors.sqlite"))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := s.CreateCollection(ctx, "v", 2, ports.MetricEuclid); err != nil {
		t.Fatalf("CreateCollection: %v", err)
	}
	if err := s.Upsert(ctx, "v", []ports.Vector{{ID: "a", Values: []float32{1, 0}}}); err != nil {
		t.Fatalf("Upsert: %v", err)
	}
	// The search is given the connection that refuses rollbacks, the one
	// last given back, and gives it back after it.
	sqlitedbtest.RefuseRollbacks(t, s.db)
	if got, err := s.Search(ctx, "v", []float32{1, 0}, 5, nil); err != nil || len(got) != 1 {
		t.Fatalf("a search whose rollback failed: %v, %v; want vector a", got, err)
	}
	if err := s.Upsert(ctx, "v", []ports.Vector{{ID: "b", Values: []float32{0, 1}}}); err != nil {
		t.Fatalf("the upsert after it: %v", err)
	}
	if _, err := s.Get(ctx, "v", "b"); err != nil {
		t.Fatalf("a get of the vector upserted after it: %v", err)
	}
	got, err := s.Search(ctx, "v", []float32{0, 1}, 5, nil)
	if err != nil || len(got) != 2 {
		t.Fatalf("the search after it: %v, %v; want vectors a and b", got, err)
	}
}

// An upsert whose COMMIT failed, and the driver's rollback after it too,
// does not leave its connection in the pool inside its transaction: the
// connection is closed, and the next write begins on a fresh one.
func TestAnUpsertWhoseCommitAndRollbackFailedLeavesNoConnectionInItsTransaction(t *testing.T) {
	s := openLoaded(t, filepath.Join(t.TempDir(), "vectors.sqlite"))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := s.CreateCollection(ctx, "v", 2, ports.MetricEuclid); err != nil {
		t.Fatalf("CreateCollection: %v", err)
	}
	sqlitedbtest.RefuseCommitsAndRollbacks(t, s.db)
	if err := s.Upsert(ctx, "v", []ports.Vector{{ID: "a", Values: []float32{1, 0}}}); err == nil || errors.Is(err, ports.ErrNotDone) {
		t.Fatalf("an upsert whose commit failed: %v, want an error, never ErrNotDone", err)
	}
	if err := s.Upsert(ctx, "v", []ports.Vector{{ID: "b", Values: []float32{0, 1}}}); err != nil {
		t.Fatalf("the next upsert: %v", err)
	}
}
