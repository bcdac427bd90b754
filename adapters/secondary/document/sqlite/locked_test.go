package sqlite

import (
	"context"
	"testing"

	"github.com/abi-engine/engine/internal/sqlitedb/sqlitedbtest"
	"github.com/abi-engine/engine/ports"
)

// A put refused because another connection, as another engine on this
// host, held the file's write lock until its answer was due changed nothing,
// and says so (ports.ErrNotDone), which the API answers 503 with
// Retry-After. Before, it was a 500, as a write that may have landed.
func TestAPutRefusedForTheFilesLockIsNotDone(t *testing.T) {
	s := openCollection(t)
	sqlitedbtest.LockedFileRefusesWrites(t, s.path,
		func(ctx context.Context) error {
			_, err := s.Put(ctx, "c", "d", map[string]any{"k": "v"}, ports.Cond{})
			return err
		},
		func() bool {
			d, err := s.Get(t.Context(), "c", "d")
			return err == nil && d.Data["k"] == "v"
		})
}
