package sqlite

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/abi-engine/engine/internal/sqlitedb/sqlitedbtest"
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
