package pgdb_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	kvpg "github.com/abi-engine/engine/adapters/secondary/keyvalue/postgres"
	"github.com/abi-engine/engine/internal/pgdb"
	"github.com/abi-engine/engine/internal/pgtest"
	"github.com/abi-engine/engine/internal/testenv"
	"github.com/abi-engine/engine/ports"
)

func inAccount(ctx context.Context, account string, err error) context.Context {
	return ports.WithAccount(ctx, func(context.Context) (string, error) { return account, err })
}

// A table belongs to the first account whose engine opens it: that
// account's engines open it again, another's is refused naming both, an
// engine that cannot tell its account opens it not at all, and a tool
// (no account) opens it as before.
func TestATableBelongsToTheFirstAccountThatOpensIt(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	cfg := kvpg.Config{DSN: dsn, Table: pgtest.Table(t, dsn, "account")}
	open := func(ctx context.Context) error {
		kv, err := kvpg.Open(ctx, cfg)
		if err == nil {
			_ = kv.Close()
		}
		return err
	}
	ctx := t.Context()
	if err := open(inAccount(ctx, "TEAM_A", nil)); err != nil {
		t.Fatalf("the first account's engine: %v", err)
	}
	if err := open(inAccount(ctx, "TEAM_A", nil)); err != nil {
		t.Fatalf("the first account's next engine: %v", err)
	}
	err := open(inAccount(ctx, "TEAM_B", nil))
	if !errors.Is(err, pgdb.ErrOtherAccount) || !strings.Contains(err.Error(), `"TEAM_A"`) || !strings.Contains(err.Error(), `"TEAM_B"`) || !strings.Contains(err.Error(), cfg.Table) {
		t.Fatalf("another account's engine: %v, want ErrOtherAccount naming both accounts and the table", err)
	}
	unknown := errors.New("no answer from the broker")
	if err := open(inAccount(ctx, "", unknown)); !errors.Is(err, unknown) {
		t.Fatalf("an engine that cannot learn its account: %v, want its cause", err)
	}
	if err := open(ctx); err != nil {
		t.Fatalf("a tool, with no account: %v", err)
	}
	if _, err := kvpg.Open(ctx, kvpg.Config{DSN: dsn, Table: pgdb.AccountTable}); !errors.Is(err, ports.ErrInvalidArgument) {
		t.Fatalf("a store on the account table: %v, want ErrInvalidArgument", err)
	}
}
