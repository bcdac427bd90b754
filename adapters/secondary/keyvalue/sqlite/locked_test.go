package sqlite

import (
	"path/filepath"
	"testing"

	"github.com/abi-engine/engine/internal/sqlitedb/sqlitedbtest"
)

// A set refused because another connection, as another engine on this
// host, held the file's write lock past the busy timeout changed nothing,
// and says so (ports.ErrNotDone), which the API answers 503 with
// Retry-After. Before, it was a 500, as a write that may have landed.
func TestASetRefusedForTheFilesLockIsNotDone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.sqlite")
	s, err := Open(t.Context(), Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	sqlitedbtest.LockedFileRefusesWrites(t, s.db.Write, path,
		func() error { return s.Set(t.Context(), "k", []byte("v"), 0) },
		func() bool {
			ok, err := s.Exists(t.Context(), "k")
			return err == nil && ok
		})
}
