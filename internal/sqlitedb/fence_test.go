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

// openFence opens a file with only the fence's table, and the fence on
// its writer, closed when the test ends.
func openFence(t *testing.T) (*sqlitedb.DB, *sqlitedb.Fence) {
	t.Helper()
	return openFenceAt(t, filepath.Join(t.TempDir(), "fence.sqlite"))
}

// openFenceAt is openFence on the file at path.
func openFenceAt(t *testing.T, path string) (*sqlitedb.DB, *sqlitedb.Fence) {
	t.Helper()
	db, err := sqlitedb.Open(t.Context(), "test", path, sqlitedb.FenceSchema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	fence, err := sqlitedb.NewFence(t.Context(), db.Write, "test", path)
	if err != nil {
		t.Fatal(err)
	}
	return db, fence
}

// The first write of a new term raises the fence, then begins the write:
// two waits for the file's lock, which end together by the moment the
// call's wait ends. Here the raise takes the lock at once, and then, as
// though it had waited long for it, the clock stands at the moment the
// answer is due, and another connection holds the lock: the write's BEGIN,
// refused once, is not tried again, and the write is not done. The clock
// is the test's, so a slow machine cannot make the test fail.
func TestAWriteAfterARaiseWaitsOnlyForWhatTheRaiseLeft(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.sqlite")
	db, fence := openFenceAt(t, path)
	start := time.Now()
	due := start.Add(5 * time.Second)
	raised, reads := false, 0
	db.SetClock(func() time.Time {
		if !raised {
			return start
		}
		reads++
		return due
	})
	fence.SetRaising(func() {
		sqlitedbtest.HoldWriteLock(t, path)
		raised = true
	})
	wctx, end, err := db.WriteTurn(ports.WithAnswerBy(ports.WithFencingToken(t.Context(), 1), due))
	if err != nil {
		t.Fatal(err)
	}
	defer end()
	conn, err := db.Write.Conn(wctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tx, err := fence.Begin(wctx, conn, db.Wait())
	if err == nil {
		_ = tx.Rollback()
		t.Fatal("a write began while another connection held the lock")
	}
	if !raised {
		t.Fatalf("the raise did not run: %v", err)
	}
	if !errors.Is(err, ports.ErrNotDone) || !busy(err) {
		t.Fatalf("a write whose raise left it no time, the lock held: %v, want ports.ErrNotDone for SQLITE_BUSY", err)
	}
	if reads != 1 {
		t.Fatalf("the write read the clock %d times after the raise, want 1: once after its one try", reads)
	}
}

// A write of a new term whose call is cancelled before its raise of the
// fence begins ran neither the raise nor the write: it is not done
// (ports.ErrNotDone), not one whose outcome is unknown, and says why.
func TestAWriteWhoseRaiseIsCancelledIsNotDone(t *testing.T) {
	db, fence := openFence(t)
	conn, err := db.Write.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	call, cancel := context.WithCancel(ports.WithFencingToken(t.Context(), 1))
	cancel()
	tx, err := fence.Begin(call, conn, sqlitedb.WaitFor(call))
	if err == nil {
		_ = tx.Rollback()
		t.Fatal("a write of a new term whose call was cancelled began")
	}
	if !errors.Is(sqlitedb.NotDone(err), ports.ErrNotDone) {
		t.Fatalf("a write of a new term whose raise was cancelled: %v, want ports.ErrNotDone", err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a write of a new term whose call was cancelled: %v, want its cancellation named", err)
	}
}

// Begin fails before the caller's write has run any statement of its own,
// so a failure of it is ports.ErrNotDone, bar the fence's refusal: here the
// raise's BEGIN, refused for another reason than the lock (the connection
// is already in a transaction), and the write's BEGIN, refused as its call
// was cancelled. Before, each was a plain error, a write of unknown
// outcome.
func TestABeginThatFailsBeforeTheWriteRanIsNotDone(t *testing.T) {
	for _, what := range []string{"TheRaisesBegin", "TheWritesBegin"} {
		t.Run(what, func(t *testing.T) {
			db, fence := openFence(t)
			conn, err := db.Write.Conn(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })
			call, cancel := context.WithCancel(t.Context())
			defer cancel()
			switch what {
			case "TheRaisesBegin":
				call = ports.WithFencingToken(call, 1)
				if _, err := conn.ExecContext(t.Context(), "BEGIN"); err != nil {
					t.Fatal(err)
				}
			case "TheWritesBegin":
				cancel()
			}
			tx, err := fence.Begin(call, conn, sqlitedb.WaitFor(call))
			if err == nil {
				_ = tx.Rollback()
				t.Fatalf("%s began, though it was to fail", what)
			}
			if !errors.Is(err, ports.ErrNotDone) || errors.Is(err, ports.ErrFenced) {
				t.Fatalf("a write whose Begin failed at %s: %v, want ports.ErrNotDone", what, err)
			}
		})
	}
}
