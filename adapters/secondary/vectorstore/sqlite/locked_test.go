package sqlite

import (
	"path/filepath"
	"testing"

	"github.com/abi-engine/engine/internal/sqlitedb/sqlitedbtest"
	"github.com/abi-engine/engine/ports"
)

// An upsert refused because another connection, as another engine on this
// host, held the file's write lock past the busy timeout changed nothing,
// and says so (ports.ErrNotDone), which the API answers 503 with
// Retry-After. Before, it was a 500, as a write that may have landed.
func TestAnUpsertRefusedForTheFilesLockIsNotDone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vectors.sqlite")
	s := openLoaded(t, path)
	if err := s.CreateCollection(t.Context(), "v", 2, ports.MetricEuclid); err != nil {
		t.Fatalf("CreateCollection: %v", err)
	}
	// The statement of a one-vector upsert is prepared before the file is
	// held to one connection, which the write's transaction then holds;
	// held to one, the busy timeout the check sets is the write's.
	if err := s.Upsert(t.Context(), "v", []ports.Vector{{ID: "first", Values: []float32{0, 1}}}); err != nil {
		t.Fatalf("Upsert: %v", err)
	}
	s.db.SetMaxOpenConns(1)
	sqlitedbtest.LockedFileRefusesWrites(t, s.db, path,
		func() error {
			return s.Upsert(t.Context(), "v", []ports.Vector{{ID: "a", Values: []float32{1, 2}}})
		},
		func() bool {
			_, err := s.Get(t.Context(), "v", "a")
			return err == nil
		})
}
