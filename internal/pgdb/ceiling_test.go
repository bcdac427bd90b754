package pgdb

import (
	"context"
	"testing"
	"time"

	"github.com/abi-engine/engine/internal/pgtest"
	"github.com/abi-engine/engine/internal/testenv"
	"github.com/abi-engine/engine/ports"
)

// A read ends a moment after its caller's answer is due, when that comes
// before the ceiling; a write, whose outcome a cut would leave unknown,
// runs on to the ceiling. The deadlines are read, not waited for.
func TestAReadEndsByItsAnswerAndAWriteByTheCeiling(t *testing.T) {
	due := time.Now().Add(3 * time.Second)
	ctx := ports.WithAnswerBy(context.Background(), due)

	read, end := DefaultCeiling.Read(ctx)
	t.Cleanup(func() { _ = end(nil) })
	if got, ok := read.Deadline(); !ok || !got.Equal(due.Add(readMargin)) {
		t.Errorf("a read whose answer is due at %v ends at %v (%v), want %v", due, got, ok, due.Add(readMargin))
	}
	write, end := DefaultCeiling.Write(ctx)
	t.Cleanup(func() { _ = end(nil) })
	if got, ok := write.Deadline(); !ok || !got.After(due.Add(time.Duration(DefaultCeiling)/2)) {
		t.Errorf("a write whose answer is due at %v ends at %v (%v), want at its ceiling", due, got, ok)
	}
	sooner, cancel := context.WithDeadline(ctx, due.Add(-time.Second))
	t.Cleanup(cancel)
	read, end = DefaultCeiling.Read(sooner)
	t.Cleanup(func() { _ = end(nil) })
	if got, _ := read.Deadline(); !got.Equal(due.Add(-time.Second)) {
		t.Errorf("a read whose caller's deadline is %v ends at %v", due.Add(-time.Second), got)
	}
}

// A dsn that sets no connect_timeout gets DefaultConnectTimeout, so that
// the pool's attempt to connect to a server that never answers ends; one
// the dsn sets is kept.
func TestAConnectionOpensWithinTheDefaultConnectTimeoutUnlessTheDSNSetsOne(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	table := pgtest.Table(t, dsn, "connecttimeout")
	schema := "CREATE TABLE IF NOT EXISTS " + Ident(table) + " (k text)"
	for given, want := range map[string]time.Duration{
		dsn: DefaultConnectTimeout,
		pgtest.WithParam(t, dsn, "connect_timeout", "3"): 3 * time.Second,
	} {
		pool, err := Open(t.Context(), "connect timeout test", given, table, schema)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		if got := pool.Config().ConnConfig.ConnectTimeout; got != want {
			t.Errorf("connect timeout = %v, want %v", got, want)
		}
	}
}
