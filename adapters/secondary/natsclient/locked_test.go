package natsclient_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	vecsqlite "github.com/abi-engine/engine/adapters/secondary/vectorstore/sqlite"
	"github.com/abi-engine/engine/internal/sqlitedb/sqlitedbtest"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// An upsert sent through the serving engine to a SQLite vector file whose
// write lock another engine on the host holds is refused as not done
// (503), while the client still waits, and is not in the file. Before, the
// store waited the busy timeout of 10 s for the lock, as long as the client
// waits by default, and the client timed out first (504), not knowing
// whether the upsert was done.
func TestAnUpsertThroughTheEngineToALockedSQLiteFileIsNotDoneBeforeTheClientGivesUp(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "vectors.sqlite")
	store, err := vecsqlite.Open(t.Context(), vecsqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	if err := store.CreateCollection(t.Context(), "v", 2, ports.MetricEuclid); err != nil {
		t.Fatal(err)
	}
	vs := natsclient.NewVectorStore(serve(t, natsapi.VectorStore(store))(t))
	sqlitedbtest.HoldWriteLock(t, path)
	err = vs.Upsert(t.Context(), "v", []ports.Vector{{ID: "a", Values: []float32{1, 2}}})
	if !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), "not done") || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an upsert through the engine while another connection holds the file's lock: %v, want 503 not done", err)
	}
	if _, err := store.Get(t.Context(), "v", "a"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("the upsert refused as not done: Get says %v, want ports.ErrNotFound", err)
	}
}
