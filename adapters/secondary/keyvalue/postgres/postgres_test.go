package postgres_test

import (
	"errors"
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/keyvalue/postgres"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/internal/pgtest"
	"github.com/abi-engine/engine/internal/testenv"
	"github.com/abi-engine/engine/ports"
)

func TestKeyValueContract(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
		contracttests.RunKeyValue(t, contracttests.HarnessFunc[ports.KeyValue](func(t *testing.T) func(*testing.T) ports.KeyValue {
			cfg := postgres.Config{DSN: dsn, Table: pgtest.Table(t, dsn, "kvtest")}
			return func(t *testing.T) ports.KeyValue {
				store, err := postgres.Open(t.Context(), cfg)
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				t.Cleanup(func() { _ = store.Close() })
				return store
			}
		}), contracttests.KeyValueCapabilities{Durable: true, Fenced: true, KeepsReads: true})
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
