package sqlitedb_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

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
	c, err := sqlitedb.StartCheckpointer(path, 10*time.Millisecond)
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
