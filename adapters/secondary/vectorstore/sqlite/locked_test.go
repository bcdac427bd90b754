package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/abi-engine/engine/internal/sqlitedb"
	"github.com/abi-engine/engine/internal/sqlitedb/sqlitedbtest"
	"github.com/abi-engine/engine/ports"
)

// An upsert refused because another connection, as another engine on this
// host, held the file's write lock until its answer was due changed nothing,
// and says so (ports.ErrNotDone), which the API answers 503 with
// Retry-After. Before, it was a 500, as a write that may have landed.
func TestAnUpsertRefusedForTheFilesLockIsNotDone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vectors.sqlite")
	s := openLoaded(t, path)
	if err := s.CreateCollection(t.Context(), "v", 2, ports.MetricEuclid); err != nil {
		t.Fatalf("CreateCollection: %v", err)
	}
	sqlitedbtest.LockedFileRefusesWrites(t, path,
		func(ctx context.Context) error {
			return s.Upsert(ctx, "v", []ports.Vector{{ID: "a", Values: []float32{1, 2}}})
		},
		func() bool {
			_, err := s.Get(t.Context(), "v", "a")
			return err == nil
		})
}

// An upsert that fails before its transaction begins, as it takes a
// connection or sets the connection's wait for the file's lock, has run
// none of its statements: it is not done (ports.ErrNotDone), and nothing
// of it is in the file. Before, either failure was a plain error, a write
// of unknown outcome. Here the first fails as the call is cancelled, and
// the second as the connection breaks.
func TestAnUpsertThatFailsBeforeItsTransactionBeginsIsNotDone(t *testing.T) {
	for _, at := range []string{"TakingAConnection", "SettingTheWait"} {
		t.Run(at, func(t *testing.T) {
			s := openLoaded(t, filepath.Join(t.TempDir(), "vectors.sqlite"))
			if err := s.CreateCollection(t.Context(), "v", 2, ports.MetricEuclid); err != nil {
				t.Fatalf("CreateCollection: %v", err)
			}
			call, cancel := context.WithCancel(ports.WithAnswerBy(t.Context(), time.Now().Add(sqlitedb.BusyTimeout/2)))
			defer cancel()
			switch at {
			case "TakingAConnection":
				s.hooks.connecting = cancel
			case "SettingTheWait":
				s.hooks.connected = sqlitedb.Drop
			}
			err := s.Upsert(call, "v", []ports.Vector{{ID: "a", Values: []float32{1, 2}}})
			if !errors.Is(err, ports.ErrNotDone) {
				t.Fatalf("an upsert that failed %s: %v, want ports.ErrNotDone", at, err)
			}
			if _, err := s.Get(t.Context(), "v", "a"); !errors.Is(err, ports.ErrNotFound) {
				t.Fatalf("Get of the upsert told not done: %v, want ErrNotFound", err)
			}
		})
	}
}
