package sqlitedbtest

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/abi-engine/engine/ports"
)

// LockedFileRefusesWrites holds the write lock of the file at path on a
// connection of its own (BEGIN IMMEDIATE), as another engine on this host
// would, and writes under a call whose answer is due at once, so that the
// write makes one try for the lock. It fails the test unless that write is
// refused as ports.ErrNotDone, for SQLITE_BUSY, and landed reports it
// absent; and unless, once the lock is let go, the same write lands.
func LockedFileRefusesWrites(t *testing.T, path string, write func(ctx context.Context) error, landed func() bool) {
	t.Helper()
	release := HoldWriteLock(t, path)
	err := write(ports.WithAnswerBy(t.Context(), time.Now()))
	var se *sqlite.Error
	if !errors.Is(err, ports.ErrNotDone) || !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY {
		t.Fatalf("a write while another connection holds the file's write lock: %v, want ports.ErrNotDone for SQLITE_BUSY", err)
	}
	release()
	if landed() {
		t.Fatal("the write refused as not done is in the file")
	}
	if err := write(t.Context()); err != nil {
		t.Fatalf("the write once the lock was let go: %v", err)
	}
	if !landed() {
		t.Fatal("the write once the lock was let go is not in the file")
	}
}

// HoldWriteLock takes the write lock of the file at path on a connection of
// its own (BEGIN IMMEDIATE), as another engine on this host in a write
// would, and returns the function that lets it go; the test's end lets it
// go too.
func HoldWriteLock(t *testing.T, path string) (release func()) {
	t.Helper()
	other, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	holder, err := other.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Close() })
	if _, err := holder.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatalf("take the file's write lock on another connection: %v", err)
	}
	return func() {
		t.Helper()
		if _, err := holder.ExecContext(t.Context(), "ROLLBACK"); err != nil {
			t.Fatalf("let the file's write lock go: %v", err)
		}
	}
}
