package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/abi-engine/engine/adapters/secondary/keyvalue/postgres"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/internal/testenv"
	"github.com/abi-engine/engine/ports"
)

// tableFor names a table after the test, so parallel tests on one server
// never share one.
func tableFor(t *testing.T) string {
	h := fnv.New64a()
	h.Write([]byte(t.Name()))
	return fmt.Sprintf("kvtest_%016x", h.Sum64())
}

// dropTable removes the test's table when the test ends.
func dropTable(t *testing.T, dsn, table string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Errorf("connect to drop table %s: %v", table, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{table}.Sanitize()); err != nil {
			t.Errorf("drop table %s: %v", table, err)
		}
	})
}

func TestKeyValueContract(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
		contracttests.RunKeyValue(t, contracttests.KeyValueHarnessFunc(func(t *testing.T) func(*testing.T) ports.KeyValue {
			cfg := postgres.Config{DSN: dsn, Table: tableFor(t)}
			dropTable(t, dsn, cfg.Table)
			return func(t *testing.T) ports.KeyValue {
				store, err := postgres.Open(t.Context(), cfg)
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				t.Cleanup(func() { _ = store.Close() })
				return store
			}
		}), contracttests.KeyValueCapabilities{Durable: true})
	})
}

func TestOpenRefusesABadConfig(t *testing.T) {
	for name, c := range map[string]postgres.Config{
		"no dsn":           {Table: "kv"},
		"quoted table":     {DSN: "postgres://127.0.0.1:1/x", Table: `kv"; DROP TABLE x; --`},
		"upper-case table": {DSN: "postgres://127.0.0.1:1/x", Table: "KV"},
	} {
		if _, err := postgres.Open(t.Context(), c); !errors.Is(err, ports.ErrInvalidArgument) {
			t.Errorf("%s: err %v, want ErrInvalidArgument", name, err)
		}
	}
}

func TestStorageIsShared(t *testing.T) {
	if got := (postgres.Config{DSN: "postgres://db/x"}).LocalStorage(); got != "" {
		t.Fatalf("LocalStorage = %q, want \"\"", got)
	}
}
