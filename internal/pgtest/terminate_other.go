//go:build !linux

package pgtest

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// TerminateIdle waits on the connection's socket as Linux lets it: the
// test is skipped.
func TerminateIdle(t testing.TB, _ *pgxpool.Pool, _ string) {
	t.Helper()
	t.Skip("pgtest: ending a pooled connection's session and waiting for it to be told needs Linux")
}
