package sqlitedb_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/abi-engine/engine/internal/sqlitedb"
	"github.com/abi-engine/engine/ports"
)

type key struct{}

func openTurns(t *testing.T) *sqlitedb.DB {
	t.Helper()
	db, err := sqlitedb.Open(t.Context(), "test", filepath.Join(t.TempDir(), "turn.sqlite"), "CREATE TABLE IF NOT EXISTS t (v INTEGER)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// One write at a time: a second write waits while the first holds the
// turn, and gives up by its own deadline, not done; once the first ends its
// turn, the next write takes it.
func TestAWriteWaitsForItsTurnUnderItsContext(t *testing.T) {
	db := openTurns(t)
	_, end, err := db.WriteTurn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, _, err := db.WriteTurn(ctx); !errors.Is(err, ports.ErrNotDone) {
		t.Fatalf("a write waiting while another holds the turn: %v, want ports.ErrNotDone by its deadline", err)
	}
	end()
	ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, end, err = db.WriteTurn(ctx)
	if err != nil {
		t.Fatalf("a write once the turn ended: %v", err)
	}
	end()
}

// A write whose context has already ended takes no turn, even a free one.
func TestAWriteWithAnEndedContextTakesNoTurn(t *testing.T) {
	db := openTurns(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for range 100 {
		if _, _, err := db.WriteTurn(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("WriteTurn with a cancelled context: %v, want canceled", err)
		}
	}
}

// Once the turn is taken, the write's statements run to their end: the
// caller giving up does not cut them short half way, and the context keeps
// the caller's values, the fencing token among them.
func TestAWriteInItsTurnRunsUnderItsValuesWithoutItsCancellation(t *testing.T) {
	db := openTurns(t)
	ctx, cancel := context.WithCancel(context.WithValue(t.Context(), key{}, "term 7"))
	wctx, end, err := db.WriteTurn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer end()
	cancel()
	if err := wctx.Err(); err != nil {
		t.Fatalf("the turn's context ended with the caller's: %v", err)
	}
	if got := wctx.Value(key{}); got != "term 7" {
		t.Fatalf("the turn's context carries %v, not the caller's value", got)
	}
	if _, err := db.Write.ExecContext(wctx, "INSERT INTO t (v) VALUES (1)"); err != nil {
		t.Fatalf("a statement in the turn after the caller gave up: %v", err)
	}
}

// The writer's connection waits for the file's lock one try at a time
// (LockTry) in every write's turn, however long the call allows, and not
// at all for a call due now, on a connection the writer opens anew too
// (database/sql drops one its driver calls bad, as one whose statement was
// interrupted): the write, not SQLite's busy handler, decides on the clock
// whether to try again.
// Before, the busy timeout was the call's whole wait, which SQLite counts
// in the sleeps it schedules, each late on a loaded host, so the wait ran
// past the moment the call's answer was due.
func TestTheWritersConnectionWaitsForTheLockOneTryAtATime(t *testing.T) {
	db := openTurns(t)
	calls := []struct {
		name string
		call context.Context
		want time.Duration
	}{
		{"DueInFiveSeconds", ports.WithAnswerBy(t.Context(), time.Now().Add(5*time.Second)), sqlitedb.LockTry},
		{"NotDue", t.Context(), sqlitedb.LockTry},
		{"DueNow", ports.WithAnswerBy(t.Context(), time.Now()), 0},
	}
	for _, c := range calls {
		wantLockWait(t, db, c.call, c.want, c.name)
	}
	conn, err := db.Write.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Raw(func(any) error { return driver.ErrBadConn }); !errors.Is(err, driver.ErrBadConn) {
		t.Fatalf("drop the writer's connection: %v", err)
	}
	// The last write set no try; the first on the new connection asks the
	// same, which the handle stands at, so it sets none either.
	for i := range calls {
		c := calls[len(calls)-1-i]
		wantLockWait(t, db, c.call, c.want, c.name+"OnAReplacedConnection")
	}
}

// wantLockWait takes a write's turn under ctx and fails the test unless the
// writer's connection then waits want for the file's lock.
func wantLockWait(t *testing.T, db *sqlitedb.DB, ctx context.Context, want time.Duration, name string) {
	t.Helper()
	wctx, end, err := db.WriteTurn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer end()
	var ms int64
	if err := db.Write.QueryRowContext(wctx, "PRAGMA busy_timeout").Scan(&ms); err != nil {
		t.Fatal(err)
	}
	if got := time.Duration(ms) * time.Millisecond; got != want {
		t.Fatalf("%s: the writer's connection waits %v for the file's lock in a write's turn, want %v", name, got, want)
	}
}

// A write whose wait for the file's lock could not be set, here because
// the handle was closed, ran none of its statements: it is not done, and
// leaves the turn free. Before, it failed with a plain error, an unknown
// outcome.
func TestAWriteWhoseWaitCannotBeSetIsNotDone(t *testing.T) {
	db := openTurns(t)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// Due now, the write waits for no lock, which is not the try the
	// handle stands at, so WriteTurn sets it on the closed writer.
	due := ports.WithAnswerBy(t.Context(), time.Now())
	if _, _, err := db.WriteTurn(due); !errors.Is(err, ports.ErrNotDone) {
		t.Fatalf("a write whose wait could not be set: %v, want ports.ErrNotDone", err)
	}
	// A write whose try is the one the handle stands at sets nothing:
	// it takes the turn, which the failed write left free.
	_, end, err := db.WriteTurn(t.Context())
	if err != nil {
		t.Fatalf("a write after one whose wait could not be set: %v", err)
	}
	end()
}
