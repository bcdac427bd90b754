package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	httpapi "github.com/abi-engine/engine/adapters/primary/http"
	kvmemory "github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
	kvsqlite "github.com/abi-engine/engine/adapters/secondary/keyvalue/sqlite"
	"github.com/abi-engine/engine/internal/sqlitedb/sqlitedbtest"
	"github.com/abi-engine/engine/ports"
)

// notDoneKV fails every Set as a store that did not do it (ports.ErrNotDone),
// naming a file of the engine's host, and counts the Sets.
type notDoneKV struct {
	ports.KeyValue
	sets atomic.Int64
}

const notDoneFile = "/var/lib/abi/objects/.upload-17"

func (n *notDoneKV) Set(context.Context, string, []byte, time.Duration) error {
	n.sets.Add(1)
	return fmt.Errorf("set: the service refused each sending of %s: %w", notDoneFile, ports.ErrNotDone)
}

// A write its store did not do, and that changed nothing (ports.ErrNotDone),
// answers 503 with Retry-After, which tells the client to send it again,
// whether the API calls the store in the process or through the serving
// engine; and, as a 500's, its body says what failed and where in the log
// the rest is, never the store's text. Before, it answered 500, "failed in
// the engine", which a client may not send again blindly. The same holds
// of a real store: a SQLite file whose write lock another engine on the
// host holds for as long as the write waits for it, called in the process.
func TestAWriteTheStoreDidNotDoAnswers503WithRetryAfter(t *testing.T) {
	for _, via := range []string{"in the process", "through the engine"} {
		t.Run(via, func(t *testing.T) {
			inner, err := kvmemory.Open(t.Context(), kvmemory.Config{})
			if err != nil {
				t.Fatal(err)
			}
			kv := &notDoneKV{KeyValue: inner}
			services := httpapi.Services{KeyValue: kv}
			if via == "through the engine" {
				services = heldKernel(t, kv)
			}
			a := serveAPI(t, services, httpapi.Options{})
			expectNotDone(t, a, notDoneFile)
			if kv.sets.Load() == 0 {
				t.Fatalf("the store saw no Set: the test shows nothing")
			}
		})
	}
	t.Run("SQLiteLockedInTheProcess", func(t *testing.T) {
		t.Parallel()
		kv, path := lockedSQLiteKeyValue(t)
		a := serveAPI(t, httpapi.Services{KeyValue: kv}, httpapi.Options{})
		expectNotDone(t, a, path)
		wantNotWritten(t, kv)
	})
}

// expectNotDone puts key k and expects a 503 with Retry-After whose body
// says the write may be sent again and gives a log reference, and does not
// carry secret, a path the store's own text names.
func expectNotDone(t *testing.T, a *api, secret string) {
	t.Helper()
	resp, body := a.expect(http.StatusServiceUnavailable, "PUT", "/v1/kv/k", "v")
	if resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a 503 for a write the store did not do has no Retry-After: %s", body)
	}
	if strings.Contains(body, secret) {
		t.Fatalf("the 503 body carries the store's text: %s", body)
	}
	if !strings.Contains(body, "log ref ") || !strings.Contains(body, "send it again") {
		t.Fatalf("the 503 body %s names neither a log reference nor that the write may be sent again", body)
	}
}

// lockedSQLiteKeyValue opens a SQLite keyvalue file whose write lock
// another connection holds until the test ends, as another engine on this
// host in a write would (sqlitedbtest.HoldWriteLock).
func lockedSQLiteKeyValue(t *testing.T) (kv *kvsqlite.Store, path string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "kv.sqlite")
	kv, err := kvsqlite.Open(t.Context(), kvsqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kv.Close() })
	sqlitedbtest.HoldWriteLock(t, path)
	return kv, path
}

// wantNotWritten fails the test when the write expectNotDone sent is in kv.
func wantNotWritten(t *testing.T, kv *kvsqlite.Store) {
	t.Helper()
	if ok, err := kv.Exists(t.Context(), "k"); err != nil || ok {
		t.Fatalf("the write answered 503 is in the file: %v, %v", ok, err)
	}
}

// A write sent through the serving engine to a SQLite file whose write
// lock another engine on the host holds answers 503 with Retry-After, and
// the write is not in the file. Before, the engine waited the busy timeout
// of 10 s for the lock, as long as its client waits by default, so the
// client gave up first and the API answered 504, not knowing whether the
// write was done; the engine now stops waiting in time to answer that it
// was not (the client tells it how long it waits, in Abi-Wait).
func TestAWriteThroughTheEngineToALockedSQLiteFileAnswers503BeforeItsClientGivesUp(t *testing.T) {
	t.Parallel()
	kv, path := lockedSQLiteKeyValue(t)
	a := serveAPI(t, heldKernel(t, kv), httpapi.Options{})
	expectNotDone(t, a, path)
	wantNotWritten(t, kv)
}
