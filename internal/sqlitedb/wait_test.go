package sqlitedb_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/abi-engine/engine/internal/sqlitedb"
	"github.com/abi-engine/engine/internal/sqlitedb/sqlitedbtest"
	"github.com/abi-engine/engine/ports"
)

// busy reports whether err is SQLite's refusal for the file's lock.
func busy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// beginUnder takes a write's turn on db under call and begins the write's
// transaction through fence, in a goroutine, and returns what Begin
// returned; if it has not returned after 30 s, the lock is let go
// (release), so that it does, and the test fails.
func beginUnder(t *testing.T, db *sqlitedb.DB, fence *sqlitedb.Fence, call context.Context, release func()) (*sql.Tx, error) {
	t.Helper()
	type began struct {
		tx  *sql.Tx
		err error
	}
	done := make(chan began, 1)
	go func() {
		wctx, end, err := db.WriteTurn(call)
		if err != nil {
			done <- began{err: err}
			return
		}
		defer end()
		conn, err := db.Write.Conn(wctx)
		if err != nil {
			done <- began{err: err}
			return
		}
		tx, err := fence.Begin(wctx, conn, db.Wait())
		if err != nil {
			_ = conn.Close()
		} else {
			t.Cleanup(func() { _ = tx.Rollback(); _ = conn.Close() })
		}
		done <- began{tx, err}
	}()
	select {
	case b := <-done:
		return b.tx, b.err
	case <-time.After(30 * time.Second):
		release()
		<-done
		t.Fatal("a write waiting for the file's lock had not ended after 30 s")
		return nil, nil
	}
}

// A write refused for the file's lock, which another connection holds, is
// tried again while the clock leaves time for another try before the
// moment its call's answer is due, and not after: here the test's clock
// moves a second on at each look, so a write due in five seconds is tried
// five times, the last at four seconds, and ends not done, for SQLITE_BUSY,
// having read the clock once as it took its turn and once after each try.
// Before, the write made one try as long as its whole wait, which SQLite's
// busy handler ends once its scheduled sleeps add up to it, however late
// each woke: on a loaded host, past the moment the answer was due.
func TestAWriteRefusedForTheLockIsTriedAgainUntilItsWaitEndsOnTheClock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wait.sqlite")
	db, fence := openFenceAt(t, path)
	start := time.Now()
	var reads atomic.Int64
	db.SetClock(func() time.Time { return start.Add(time.Duration(reads.Add(1)-1) * time.Second) })
	release := sqlitedbtest.HoldWriteLock(t, path)
	_, err := beginUnder(t, db, fence, ports.WithAnswerBy(t.Context(), start.Add(5*time.Second)), release)
	if !errors.Is(sqlitedb.NotDone(err), ports.ErrNotDone) || !busy(err) {
		t.Fatalf("a write whose wait ended, the lock held: %v, want ports.ErrNotDone for SQLITE_BUSY", err)
	}
	if n := reads.Load(); n != 6 {
		t.Fatalf("the write read the clock %d times, want 6: as it took its turn, and after each of its 5 tries", n)
	}
}

// A write refused for the file's lock begins once the lock is let go, when
// its wait still allows another try: here the lock is let go as the write
// looks at the clock after its first try.
func TestAWriteRefusedForTheLockBeginsOnceTheLockIsLetGoWithinItsWait(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wait.sqlite")
	db, fence := openFenceAt(t, path)
	start := time.Now()
	release := sqlitedbtest.HoldWriteLock(t, path)
	var reads atomic.Int64
	db.SetClock(func() time.Time {
		if reads.Add(1) == 2 {
			release()
		}
		return start
	})
	tx, err := beginUnder(t, db, fence, ports.WithAnswerBy(t.Context(), start.Add(5*time.Second)), func() {})
	if err != nil {
		t.Fatalf("a write whose lock was let go within its wait: %v", err)
	}
	if tx == nil {
		t.Fatal("the write began no transaction")
	}
	if n := reads.Load(); n != 2 {
		t.Fatalf("the write read the clock %d times, want 2: as it took its turn, and after its one refused try", n)
	}
}
