package pgdb_test

import (
	"testing"

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
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	table := pgtest.Table(t, dsn, "keepalive")
	pool, err := pgdb.Open(t.Context(), "keepalive test", dsn, table, "CREATE TABLE IF NOT EXISTS "+pgdb.Ident(table)+" (k text)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var socket bool
	if err := pool.QueryRow(t.Context(), "SELECT inet_client_addr() IS NULL").Scan(&socket); err != nil {
		t.Fatal(err)
	}
	if socket {
		t.Skip("ENGINE_TEST_PG_DSN reaches the server over a Unix socket, where the server reports no TCP keepalive settings; point it at a TCP address to run this test")
	}
	for setting, want := range map[string]string{
		"tcp_keepalives_idle":     "15",
		"tcp_keepalives_interval": "5",
		"tcp_keepalives_count":    "3",
	} {
		var got string
		if err := pool.QueryRow(t.Context(), "SHOW "+setting).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s of a store's session = %s, want %s", setting, got, want)
		}
	}
}
