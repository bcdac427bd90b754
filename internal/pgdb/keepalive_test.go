package pgdb_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/abi-engine/engine/internal/pgdb"
	"github.com/abi-engine/engine/internal/pgtest"
	"github.com/abi-engine/engine/internal/testenv"
)

// The server probes a store's session as the engine's end does, so that it
// drops one whose client vanished within about 30 s, and with it the locks
// the session held, such as a fence row, where the system's defaults would
// keep them for hours. The test's server is reached over TCP, where the
// session reports the settings it runs with.
func TestTheServerProbesAStoresSessionWithinAbout30Seconds(t *testing.T) {
	pool := openOverTCP(t, "keepalive")
	for setting, want := range map[string]string{
		"tcp_keepalives_idle":     "15",
		"tcp_keepalives_interval": "5",
		"tcp_keepalives_count":    "3",
	} {
		if got := show(t, pool, setting); got != want {
			t.Errorf("%s of a store's session = %s, want %s", setting, got, want)
		}
	}
}

// The server drops a store's session whose client has left the bytes sent
// to it unacknowledged for 30 s, as the engine's end drops the server's
// (TCP_USER_TIMEOUT): keepalive probes are not sent while sent bytes wait
// for their acknowledgement, and the system's retries alone would keep
// such a session, and what it holds, for about a quarter of an hour.
func TestTheServerDropsAStoresSessionWhoseBytesGoUnacknowledgedFor30Seconds(t *testing.T) {
	pool := openOverTCP(t, "usertimeout")
	if got := show(t, pool, "tcp_user_timeout"); got != "30000" {
		t.Errorf("tcp_user_timeout of a store's session = %s ms, want 30000", got)
	}
}

// openOverTCP opens a pool as a store does (pgdb.Open), on a table named
// after prefix, and skips the test when the server is reached over a Unix
// socket, where it reports no TCP settings.
func openOverTCP(t *testing.T, prefix string) *pgxpool.Pool {
	t.Helper()
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	table := pgtest.Table(t, dsn, prefix)
	pool, err := pgdb.Open(t.Context(), prefix+" test", dsn, table, "CREATE TABLE IF NOT EXISTS "+pgdb.Ident(table)+" (k text)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var socket bool
	if err := pool.QueryRow(t.Context(), "SELECT inet_client_addr() IS NULL").Scan(&socket); err != nil {
		t.Fatal(err)
	}
	if socket {
		t.Skip("ENGINE_TEST_PG_DSN reaches the server over a Unix socket, where the server reports no TCP settings; point it at a TCP address to run this test")
	}
	return pool
}

// show is the setting's value in a session of pool.
func show(t *testing.T, pool *pgxpool.Pool, setting string) string {
	t.Helper()
	var got string
	if err := pool.QueryRow(t.Context(), "SHOW "+setting).Scan(&got); err != nil {
		t.Fatal(err)
	}
	return got
}
