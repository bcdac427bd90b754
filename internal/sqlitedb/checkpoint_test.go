package sqlitedb_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/abi-engine/engine/internal/logbuf"
	"github.com/abi-engine/engine/internal/sqlitedb"
)

// openWAL opens a file the way the stores' writers do, leaving the log to
// a Checkpointer, and fills its log with about 8 MB of rows: more than
// SQLite's default of 1,000 pages, fewer than FallbackPages.
func openWAL(t *testing.T) (path string, db *sql.DB) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "wal.sqlite")
	db, err := sql.Open("sqlite", fmt.Sprintf("%s?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=wal_autocheckpoint(%d)",
		path, sqlitedb.FallbackPages))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.Exec("CREATE TABLE rows (id INTEGER PRIMARY KEY, body BLOB)"); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 4000)
	for range 2000 {
		if _, err := db.Exec("INSERT INTO rows (body) VALUES (?)", body); err != nil {
			t.Fatal(err)
		}
	}
	return path, db
}

func size(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// The writer leaves the log alone below FallbackPages: its commits copied
// nothing into the database file, and the rows are all there.
func TestACommitBelowTheFallbackDoesNotCheckpoint(t *testing.T) {
	path, db := openWAL(t)
	if got := size(t, path); got > 1<<20 {
		t.Fatalf("the database file is %d bytes: a commit checkpointed the log", got)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM rows").Scan(&n); err != nil || n != 2000 {
		t.Fatalf("%d rows (%v), want 2000", n, err)
	}
}

// A Checkpointer copies the log into the database file on its own, while
// the writer's connection stays open, and what it copied reads back.
func TestACheckpointerCopiesTheLogInTheBackground(t *testing.T) {
	path, db := openWAL(t)
	c, err := sqlitedb.StartCheckpointer(path, 10*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
		if err := c.Close(); err != nil {
			t.Errorf("a second Close: %v", err)
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for size(t, path) < 7<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("the database file is %d bytes after 30 s: the log was not copied", size(t, path))
		}
		time.Sleep(10 * time.Millisecond)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM rows").Scan(&n); err != nil || n != 2000 {
		t.Fatalf("%d rows (%v), want 2000", n, err)
	}
	if err := c.Checkpoint(context.Background()); err != nil {
		t.Fatalf("a checkpoint on demand: %v", err)
	}
}

// A checkpoint that panics, as a fault in the driver would, does not end
// the process: the panic is logged with its stack, the connection it
// happened on is dropped, and the checkpointer goes on, on another
// connection, and copies the log. Before, the panic on the checkpointer's
// goroutine ended the process, and with it an engine holding the lease.
func TestACheckpointThatPanicsIsLoggedAndTheNextOneCopiesTheLog(t *testing.T) {
	path, db := openWAL(t)
	log, logs := logbuf.Logger(slog.LevelInfo)
	var mu sync.Mutex
	var conns []any
	c, err := sqlitedb.StartCheckpointerWithFault(path, 10*time.Millisecond, log, func(conn any) {
		mu.Lock()
		conns = append(conns, conn)
		first := len(conns) == 1
		mu.Unlock()
		if first {
			panic("a fault in the driver")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for size(t, path) < 7<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("the database file is %d bytes after 30 s: no checkpoint copied the log after the one that panicked", size(t, path))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if out := logs.String(); !strings.Contains(out, "a fault in the driver") || !strings.Contains(out, "goroutine") {
		t.Fatalf("the panic was not logged with its stack; the log:\n%s", out)
	}
	mu.Lock()
	panicked, next := conns[0], conns[1]
	mu.Unlock()
	if panicked == next {
		t.Fatal("the checkpoint after the panic ran on the connection that panicked")
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM rows").Scan(&n); err != nil || n != 2000 {
		t.Fatalf("%d rows (%v), want 2000", n, err)
	}
}

// A fault that panics on every checkpoint, on every new connection, stops
// the checkpointer after a few, with an error that says so, rather than
// log a stack five times a second for good; the writers' own checkpoints
// at FallbackPages keep the log bounded, and Close still closes.
func TestACheckpointThatPanicsEveryTimeStopsTheCheckpointerWithAnError(t *testing.T) {
	path, _ := openWAL(t)
	log, logs := logbuf.Logger(slog.LevelInfo)
	c, err := sqlitedb.StartCheckpointerWithFault(path, 10*time.Millisecond, log, func(any) { panic("a fault in the driver") })
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "no longer checkpointed") {
		if time.Now().After(deadline) {
			t.Fatalf("the checkpointer did not stop in 30 s; the log:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close after the checkpointer stopped: %v", err)
	}
	if n := strings.Count(logs.String(), "a checkpoint of a SQLite log panicked"); n != 3 {
		t.Fatalf("%d panics logged, want 3 before the checkpointer stops", n)
	}
}
