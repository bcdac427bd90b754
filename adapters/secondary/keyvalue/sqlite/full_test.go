package sqlite

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/abi-engine/engine/internal/sqlitedb/sqlitedbtest"
	"github.com/abi-engine/engine/ports"
)

// A set SQLite has no room for (a full disk, or a page limit) is refused as
// ports.ErrStorageFull, which the API answers 507, and what the file held
// stays. Before, it was a 500 like any other failure.
func TestASetIntoAFullFileIsRefusedAsStorageFull(t *testing.T) {
	s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "kv.sqlite")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	value := bytes.Repeat([]byte("v"), 3000)
	sqlitedbtest.FullFileRefusesWrites(t, s.db.Write,
		func(i int) error { return s.Set(t.Context(), fmt.Sprintf("k%02d", i), value, 0) },
		func(i int) bool {
			got, err := s.Get(t.Context(), fmt.Sprintf("k%02d", i))
			return err == nil && bytes.Equal(got, value)
		})
}

// A set of a new term whose raise of the fence SQLite has no room for is
// refused as ports.ErrStorageFull, as a set that itself found no room is,
// and wrote nothing. Before, the raise's failure was a plain error, a 500.
// The file is held at its pages and the fence's table is filled with rows
// as long as the store's own, sorting beside it, until one finds no room:
// the store's row then needs a page it cannot have.
func TestASetWhoseRaiseOfTheFenceFindsAFullFileIsRefusedAsStorageFull(t *testing.T) {
	s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "kv.sqlite")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	sqlitedbtest.FillFenceTable(t, s.db.Write, "keyvalue")
	err = s.Set(ports.WithFencingToken(ctx, 1), "k", []byte("v"), 0)
	if !errors.Is(err, ports.ErrStorageFull) {
		t.Fatalf("a set whose raise of the fence found the file full: %v, want ports.ErrStorageFull", err)
	}
	if ok, err := s.Exists(ctx, "k"); err != nil || ok {
		t.Fatalf("the set refused as storage full is in the file: %v, %v", ok, err)
	}
}
