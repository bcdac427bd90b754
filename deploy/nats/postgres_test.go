package nats_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/pgtest"
	"github.com/abi-engine/engine/internal/testenv"
)

// A PostgreSQL table keeps the data, the fence and the kept reads of one
// account's lease, as a SQLite file does. An engine of another account
// configured with the same table (a configuration copied from the first
// account's with only its user changed) must not start on it: it would
// serve the first account's keys to its own callers, and raise the fence
// with tokens of its own lease, which cannot be compared with the first
// account's and refuse its engine every write. A new engine of the first
// account, as a deploy starts, opens it.
func TestAnEngineOfAnotherAccountDoesNotOpenAPostgreSQLTableOfTheFirst(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	table := pgtest.Table(t, dsn, "accounts")
	d := natstest.StartDeployed(t)
	services := fmt.Sprintf(`  keyvalue: {adapter: postgres, config: {dsn: %q, table: %s}}
  document: {adapter: memory}
  object_storage: {adapter: memory}
  vector_store: {adapter: memory}
  cache: {adapter: memory}
`, dsn, table)
	a := startEngine(t, dataDirFile(t, d, "engine_a", filepath.Join(t.TempDir(), "a"), services))
	if a.Outcome() != domain.OutcomeServe {
		t.Fatalf("A's engine: %v, want it to serve", a.Outcome())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	kvA := natsclient.NewKeyValue(natsclient.New(d.Connect(t, "caller_a")))
	if err := kvA.Set(ctx, "greeting", []byte("from A"), 0); err != nil {
		t.Fatalf("set through A's caller: %v", err)
	}

	b := newEngine(t, dataDirFile(t, d, "engine_b", filepath.Join(t.TempDir(), "b"), services))
	err := b.app.Start(ctx)
	if err == nil {
		kvB := natsclient.NewKeyValue(natsclient.New(d.Connect(t, "caller_b")))
		v, gerr := kvB.Get(ctx, "greeting")
		werr := kvB.Set(ctx, "greeting", []byte("from B"), 0)
		b.app.RequireStop()
		t.Fatalf("an engine of TEAM_B started on TEAM_A's table %s; B's caller reads A's key: %q, %v, and writes it: %v", table, v, gerr, werr)
	}
	for _, want := range []string{`"TEAM_A"`, `"TEAM_B"`, table} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("B's refusal %q does not name %s", err, want)
		}
	}
	if err := kvA.Set(ctx, "greeting", []byte("from A again"), 0); err != nil {
		t.Fatalf("A's engine cannot write after B's refusal: %v", err)
	}
	a.app.RequireStop()

	next := newEngine(t, dataDirFile(t, d, "engine_a", filepath.Join(t.TempDir(), "next"), services))
	next.app.RequireStart()
	t.Cleanup(func() { next.app.RequireStop(); next.noRefusals(t) })
	if v, err := kvA.Get(ctx, "greeting"); err != nil || string(v) != "from A again" {
		t.Fatalf("the next engine of TEAM_A reads %q, %v; want \"from A again\"", v, err)
	}
}
