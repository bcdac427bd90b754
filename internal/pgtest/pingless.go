package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Pingless closes pool and returns a pool of the same settings and dialer
// whose connections are never pinged as they are taken, with one
// connection open. pgxpool pings a connection idle for over a second, and
// a ping into a cut network, or one the server never answers, fails and
// takes the connection away, so that the statement a test means to send
// on it would open another, or find none; with no ping, it goes on the
// connection unchecked. The store the pool is handed to closes it.
func Pingless(t testing.TB, pool *pgxpool.Pool) *pgxpool.Pool {
	t.Helper()
	cfg := pool.Config()
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	p, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	pool.Close()
	if err := p.Ping(t.Context()); err != nil {
		p.Close()
		t.Fatal(err)
	}
	return p
}
