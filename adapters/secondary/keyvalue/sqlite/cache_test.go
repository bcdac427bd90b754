package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/abi-engine/engine/ports"
)

func kept(s *Store, key string) bool { return s.cache.Holds(key) }

// A read under a term is kept and served again; a write drops it; a read
// with no term keeps nothing.
func TestReadsUnderATermAreKept(t *testing.T) {
	s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "kv.sqlite")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := ports.WithFencingToken(t.Context(), 1)
	if err := s.Set(ctx, "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(t.Context(), "k"); err != nil || kept(s, "k") {
		t.Fatalf("a read without a term: err %v, kept %v; want nil, false", err, kept(s, "k"))
	}
	if _, err := s.Get(ctx, "k"); err != nil || !kept(s, "k") {
		t.Fatalf("a read under term 1: err %v, kept %v; want nil, true", err, kept(s, "k"))
	}
	// Served from the cache: the reader pool is gone.
	if err := s.db.Read.Close(); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Get(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("a kept read = %q, %v; want v", v, err)
	}
	if err := s.Set(ctx, "k", []byte("w"), 0); err != nil || kept(s, "k") {
		t.Fatalf("after a write: err %v, kept %v; want nil, false", err, kept(s, "k"))
	}
}

// A fence that cannot be raised, here because another connection holds the
// file's write lock past the call's deadline, fails no read: the read goes
// on uncached, and the failure is noted, so that the next reads do not
// each try the raise again at once.
func TestAFenceThatCannotBeRaisedFailsNoRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.sqlite")
	s, err := Open(t.Context(), Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Set(t.Context(), "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	other, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := other.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec("INSERT INTO kv (key, value) VALUES ('held', x'00')"); err != nil {
		t.Fatal(err) // the write lock is now held
	}
	ctx, cancel := context.WithTimeout(ports.WithFencingToken(t.Context(), 3), 200*time.Millisecond)
	defer cancel()
	if v, err := s.Get(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("Get while the fence cannot be raised = %q, %v; want v", v, err)
	}
	if kept(s, "k") || !s.cache.RaiseFailed() {
		t.Fatalf("after a failed raise: kept %v, failure noted %v; want false, true", kept(s, "k"), s.cache.RaiseFailed())
	}
}
