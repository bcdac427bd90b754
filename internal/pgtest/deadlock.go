package pgtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Deadlocked runs write, a store's write under a term the fence row of
// scope (the store's table) already holds, into a deadlock, and returns its
// error once the server has broken the deadlock by failing it. A
// transaction of the test's takes a row write needs, by hold; write checks
// the fence, which keeps the fence row locked to its transaction, and
// waits for that row; the test's transaction then asks for the fence row.
// The server fails whichever of the two finds the cycle first: nearly
// always write, which waited first, but the test's when that asks more
// than the server's deadlock_timeout after write began to wait (a busy
// machine), since write's own check then found no cycle yet. Write is then
// done, and the whole is tried again once reset has put back, through the
// store so that any cache of its agrees, what write changed: the row hold
// locks, with the value the caller checks after.
func Deadlocked(t testing.TB, dsn, scope, hold string, write func() error, reset func()) error {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	for range 10 {
		tx, err := conn.Begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(t.Context(), hold); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- write() }()
		AwaitBlocked(t, conn, "the store's write never waited for the row the test holds")
		_, err = tx.Exec(t.Context(), "SELECT 1 FROM abi_engine_fence WHERE scope = $1 FOR UPDATE", scope)
		if rerr := tx.Rollback(t.Context()); rerr != nil {
			t.Fatal(rerr)
		}
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
			return awaitWrite(t, done)
		case errors.As(err, &pgErr) && pgErr.Code == "40P01":
			_ = awaitWrite(t, done) // the server failed the test's transaction: write went on
			reset()
		default:
			t.Fatal(err)
		}
	}
	t.Fatal("the server never failed the store's write to break the deadlock")
	return nil
}

// AwaitBlocked returns once another session waits for a lock conn's
// session holds, whatever that session runs (pg_stat_activity cuts a long
// statement short, so matching a table's name in its text may miss it). It
// fails the test with never when none has waited within a minute.
func AwaitBlocked(t testing.TB, conn *pgx.Conn, never string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		var waiting bool
		err := conn.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE pg_backend_pid() = ANY (pg_blocking_pids(pid)))`).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(never)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// awaitWrite returns the error of the store's write once it has returned.
func awaitWrite(t testing.TB, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("the store's write did not return once the deadlock was broken")
		return nil
	}
}
