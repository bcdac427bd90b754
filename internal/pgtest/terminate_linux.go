package pgtest

import (
	"crypto/tls"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sys/unix"
)

// TerminateIdle has the server at dsn end the session of the idle
// connection pool hands out next (pg_terminate_backend, as an operator or
// a restart of the server would), and returns once the connection's end
// has been told: the server's last message, or its close, waits to be
// read there, as it would for a connection sitting in a pool. Nothing is
// read: the connection goes back to the pool as it was.
func TerminateIdle(t testing.TB, pool *pgxpool.Pool, dsn string) {
	t.Helper()
	c, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(t.Context()) }()
	var ended bool
	// The second argument has the server wait, up to a minute, for the
	// session to end.
	if err := conn.QueryRow(t.Context(), "SELECT pg_terminate_backend($1, 60000)", c.Conn().PgConn().PID()).Scan(&ended); err != nil || !ended {
		t.Fatalf("the server did not end the session: %v, %v", ended, err)
	}
	nc := c.Conn().PgConn().Conn()
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		t.Skipf("pgtest: a connection of type %T has no socket to wait on", nc)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = nc.SetReadDeadline(time.Time{}) }()
	var b [1]byte
	if err := raw.Read(func(fd uintptr) bool {
		_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		return err != unix.EAGAIN
	}); err != nil {
		t.Fatalf("the connection's end was not told its session ended: %v", err)
	}
}
