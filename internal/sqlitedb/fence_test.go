package sqlitedb_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/abi-engine/engine/internal/sqlitedb"
	"github.com/abi-engine/engine/ports"
)

// openFence opens a file with only the fence's table, and the fence on
// its writer, closed when the test ends.
func openFence(t *testing.T) (*sqlitedb.DB, *sqlitedb.Fence) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fence.sqlite")
	db, err := sqlitedb.Open(t.Context(), "test", path, sqlitedb.FenceSchema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	fence, err := sqlitedb.NewFence(t.Context(), db.Write, "test", path)
	if err != nil {
		t.Fatal(err)
	}
	return db, fence
}

// The first write of a new term raises the fence, then begins the write:
// two waits for the file's lock. The write's BEGIN may wait only for what
// the raise left of the call's wait: the connection's busy timeout when it
// begins is less than the wait the call had, and no more than what is left
// until the answer is due once the raise is done; and it is set back
// after. What is checked is the wait BEGIN is given, not how long anything
// took, so a slow machine cannot make the test fail.
func TestAWriteAfterARaiseWaitsOnlyForWhatTheRaiseLeft(t *testing.T) {
	db, fence := openFence(t)
	due := time.Now().Add(5 * time.Second)
	call := ports.WithAnswerBy(ports.WithFencingToken(t.Context(), 1), due)
	wctx, end, err := db.WriteTurn(call)
	if err != nil {
		t.Fatal(err)
	}
	defer end()
	conn, err := db.Write.Conn(wctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var before, began, after int64
	if err := conn.QueryRowContext(wctx, "PRAGMA busy_timeout").Scan(&before); err != nil {
		t.Fatal(err)
	}
	// The raise spends a second, as it would waiting for the lock.
	var raised time.Time
	fence.SetRaising(func() {
		<-time.After(time.Second)
		raised = time.Now()
	})
	// The wait is changed twice: lowered before BEGIN, and set back once
	// BEGIN is done, on the same connection: what the second change finds
	// there is what BEGIN waited under.
	changes := 0
	fence.SetSetting(func(int64) error {
		if changes++; changes == 2 {
			return conn.QueryRowContext(wctx, "PRAGMA busy_timeout").Scan(&began)
		}
		return nil
	})
	tx, err := fence.Begin(wctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if changes != 2 {
		t.Fatalf("the wait for the lock was changed %d times in a write after a raise that spent a second, want 2 (lowered, then set back)", changes)
	}
	// The wait is the whole less the time the raise spent, in whole
	// milliseconds, so it may round up by one.
	bound := max(0, due.Sub(raised).Milliseconds()) + 1
	if began >= before || began > bound {
		t.Fatalf("the write's BEGIN waited up to %d ms for the lock after a raise that spent a second of a %d ms wait, want less than %d and at most %d (until the answer is due)", began, before, before, bound)
	}
	if err := conn.QueryRowContext(wctx, "PRAGMA busy_timeout").Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("the connection waits %d ms for the lock after the write, %d ms before", after, before)
	}
}

// When the busy timeout a raise lowered cannot be set back once the write
// has begun, the connection is dropped: the write fails, its transaction
// ends, and the next write runs on a new connection with the whole wait,
// rather than the write hanging on its own open transaction and keeping
// the writer's turn from every later write.
func TestAWriteWhoseWaitCannotBeSetBackFailsAndFreesTheWriter(t *testing.T) {
	db, fence := openFence(t)
	// The raise spends a measurable time, so the wait is lowered and must
	// be set back.
	fence.SetRaising(func() { <-time.After(5 * time.Millisecond) })
	fault := errors.New("the connection refused its busy timeout")
	lowered := false
	fence.SetSetting(func(int64) error {
		if !lowered {
			lowered = true
			return nil
		}
		return fault
	})
	write := func(token uint64) error {
		wctx, end, err := db.WriteTurn(ports.WithFencingToken(t.Context(), token))
		if err != nil {
			return err
		}
		defer end()
		conn, err := db.Write.Conn(wctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		tx, err := fence.Begin(wctx, conn)
		if err != nil {
			return err
		}
		return tx.Rollback()
	}
	ended := make(chan error, 1)
	go func() { ended <- write(1) }()
	select {
	case err := <-ended:
		if !errors.Is(err, fault) {
			t.Fatalf("a write whose wait could not be set back: %v, want its fault", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a write whose wait could not be set back has not ended after 30 s")
	}
	fence.SetSetting(nil)
	go func() { ended <- write(2) }()
	select {
	case err := <-ended:
		if err != nil {
			t.Fatalf("the next write: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the next write has not ended after 30 s")
	}
}

// A write of a new term whose wait for the lock cannot be changed after
// its raise of the fence, lowered before it begins or set back once it
// has, never ran a statement of its own: it is not done (ports.ErrNotDone),
// which the API answers 503, not a 500 as a write that may have landed.
func TestAWriteWhoseWaitCannotBeChangedAfterARaiseIsNotDone(t *testing.T) {
	for name, failing := range map[string]int{"Lowering": 1, "SettingBack": 2} {
		t.Run(name, func(t *testing.T) {
			db, fence := openFence(t)
			// The raise spends a measurable time, so the wait is changed.
			fence.SetRaising(func() { <-time.After(5 * time.Millisecond) })
			changes := 0
			fence.SetSetting(func(int64) error {
				if changes++; changes == failing {
					return errors.New("the connection refused its busy timeout")
				}
				return nil
			})
			wctx, end, err := db.WriteTurn(ports.WithFencingToken(t.Context(), 1))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(end)
			conn, err := db.Write.Conn(wctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })
			tx, err := fence.Begin(wctx, conn)
			if err == nil {
				_ = tx.Rollback()
			}
			if !errors.Is(sqlitedb.NotDone(err), ports.ErrNotDone) {
				t.Fatalf("a write whose wait could not be changed after its raise: %v, want ports.ErrNotDone", err)
			}
		})
	}
}

// The first write of a new term reads its connection's wait for the lock
// before it raises the fence. When that read fails, here as its call was
// cancelled once it held the writer's connection (the vector store's
// writes run under their callers' contexts), neither the raise nor the
// write has run: the write is not done (ports.ErrNotDone), not one whose
// outcome is unknown.
func TestAWriteWhoseWaitCannotBeReadBeforeItsRaiseIsNotDone(t *testing.T) {
	db, fence := openFence(t)
	conn, err := db.Write.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	call, cancel := context.WithCancel(ports.WithFencingToken(t.Context(), 1))
	cancel()
	tx, err := fence.Begin(call, conn)
	if err == nil {
		_ = tx.Rollback()
		t.Fatal("a write of a new term whose call was cancelled began")
	}
	if !errors.Is(sqlitedb.NotDone(err), ports.ErrNotDone) {
		t.Fatalf("a write of a new term whose wait for the lock could not be read: %v, want ports.ErrNotDone", err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a write of a new term whose call was cancelled: %v, want its cancellation named", err)
	}
}

// Begin fails before the caller's write has run any statement of its own,
// so a failure of it is ports.ErrNotDone, bar the fence's refusal: here the
// raise's BEGIN, refused for another reason than the lock (the connection
// is already in a transaction), and the write's BEGIN, refused as its call
// was cancelled. Before, each was a plain error, a write of unknown
// outcome.
func TestABeginThatFailsBeforeTheWriteRanIsNotDone(t *testing.T) {
	for _, what := range []string{"TheRaisesBegin", "TheWritesBegin"} {
		t.Run(what, func(t *testing.T) {
			db, fence := openFence(t)
			conn, err := db.Write.Conn(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })
			call, cancel := context.WithCancel(t.Context())
			defer cancel()
			switch what {
			case "TheRaisesBegin":
				call = ports.WithFencingToken(call, 1)
				if _, err := conn.ExecContext(t.Context(), "BEGIN"); err != nil {
					t.Fatal(err)
				}
			case "TheWritesBegin":
				cancel()
			}
			tx, err := fence.Begin(call, conn)
			if err == nil {
				_ = tx.Rollback()
				t.Fatalf("%s began, though it was to fail", what)
			}
			if !errors.Is(err, ports.ErrNotDone) || errors.Is(err, ports.ErrFenced) {
				t.Fatalf("a write whose Begin failed at %s: %v, want ports.ErrNotDone", what, err)
			}
		})
	}
}
