package sqlite

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/abi-engine/engine/internal/sqlitedb/sqlitedbtest"
	"github.com/abi-engine/engine/ports"
)

// A write whose ROLLBACK failed leaves the writer free: its connection,
// which may still be in the write's transaction and hold the file's write
// lock, is closed, and the next write, of this handle or of another engine
// on the host, runs on a fresh one. Before, the connection went back to
// the pool inside the transaction: every later write of the handle failed
// to begin, and the lock it held kept out every other engine's.
func TestAWriteWhoseRollbackFailedLeavesTheWriterFree(t *testing.T) {
	s := openCollection(t)
	sqlitedbtest.RefuseRollbacks(t, s.db.Write)
	_, err := s.Put(t.Context(), "missing", "d", map[string]any{"n": 1.0}, ports.Cond{})
	if !errors.Is(err, ports.ErrNotFound) || errors.Is(err, ports.ErrNotDone) {
		t.Fatalf("a put into a missing collection whose rollback failed: %v, want ErrNotFound, never ErrNotDone", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := s.Put(ctx, "c", "d", map[string]any{"n": 1.0}, ports.Cond{}); err != nil {
		t.Fatalf("the next put of the handle: %v", err)
	}
	other, err := Open(ctx, Config{Path: s.path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	if _, err := other.Put(ctx, "c", "e", map[string]any{"n": 2.0}, ports.Cond{}); err != nil {
		t.Fatalf("a put of another handle on the file: %v", err)
	}
}

// A write whose COMMIT failed, and the driver's rollback after it too,
// leaves the writer free: its connection, still in the write's transaction
// and holding the file's write lock, is closed, and the next write runs on
// a fresh one. Before, the connection went back to the pool inside the
// transaction, and every later write of the handle failed to begin.
func TestAWriteWhoseCommitAndRollbackFailedLeavesTheWriterFree(t *testing.T) {
	s := openCollection(t)
	sqlitedbtest.RefuseCommitsAndRollbacks(t, s.db.Write)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := s.Put(ctx, "c", "d", map[string]any{"n": 1.0}, ports.Cond{}); err == nil || errors.Is(err, ports.ErrNotDone) {
		t.Fatalf("a put whose commit failed: %v, want an error, never ErrNotDone", err)
	}
	if _, err := s.Put(ctx, "c", "e", map[string]any{"n": 2.0}, ports.Cond{}); err != nil {
		t.Fatalf("the next put of the handle: %v", err)
	}
	other, err := Open(ctx, Config{Path: s.path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	if _, err := other.Put(ctx, "c", "f", map[string]any{"n": 3.0}, ports.Cond{}); err != nil {
		t.Fatalf("a put of another handle on the file: %v", err)
	}
}
