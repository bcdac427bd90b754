package sqlitedb_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/abi-engine/engine/internal/sqlitedb"
	"github.com/abi-engine/engine/internal/sqlitedb/sqlitedbtest"
	"github.com/abi-engine/engine/ports"
)

// The first write of a new term raises the fence, then begins the write:
// two waits for the file's lock. When the raise has used up the wait the
// call allows, and another handle then holds the lock, the write is told
// it was not done by the moment its answer is due, while its caller still
// waits, rather than after a second whole wait; and the connection's wait
// for the lock is set back after.
func TestAWriteAfterARaiseWaitsOnlyForWhatTheRaiseLeft(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.sqlite")
	db, err := sqlitedb.Open(t.Context(), "test", path, sqlitedb.FenceSchema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	fence, err := sqlitedb.NewFence(t.Context(), db.Write, "test", path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	due := time.Now().Add(2 * time.Second)
	call := ports.WithAnswerBy(ports.WithFencingToken(ctx, 1), due)
	// The raise takes the lock, and gives it up when the answer is due, to
	// another handle that then holds it.
	fence.SetRaising(func() {
		sqlitedbtest.HoldWriteLock(t, path)
		<-time.After(time.Until(due))
	})
	wctx, end, err := db.WriteTurn(call)
	if err != nil {
		t.Fatal(err)
	}
	defer end()
	conn, err := db.Write.Conn(wctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var before, after int64
	if err := conn.QueryRowContext(wctx, "PRAGMA busy_timeout").Scan(&before); err != nil {
		t.Fatal(err)
	}
	tx, err := fence.Begin(wctx, conn)
	if err == nil {
		_ = tx.Rollback()
	}
	if err := sqlitedb.NotDone(err); !errors.Is(err, ports.ErrNotDone) || ctx.Err() != nil {
		t.Fatalf("a write whose raise used up its wait, the lock held: %v (its caller's context: %v), want ports.ErrNotDone while the caller waits", err, ctx.Err())
	}
	if err := conn.QueryRowContext(wctx, "PRAGMA busy_timeout").Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("the connection waits %d ms for the lock after the write, %d ms before", after, before)
	}
}
