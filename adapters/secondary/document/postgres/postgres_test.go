package postgres_test

import (
	"errors"
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/document/postgres"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/internal/pgtest"
	"github.com/abi-engine/engine/internal/testenv"
	"github.com/abi-engine/engine/ports"
)

func TestDocumentContract(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
		contracttests.RunDocument(t, contracttests.HarnessFunc[ports.DocumentStore](func(t *testing.T) func(*testing.T) ports.DocumentStore {
			cfg := postgres.Config{DSN: dsn, Table: pgtest.Table(t, dsn, "doctest", "", "_collections")}
			return func(t *testing.T) ports.DocumentStore {
				store, err := postgres.Open(t.Context(), cfg)
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				t.Cleanup(func() { _ = store.Close() })
				return store
			}
		}), contracttests.DocumentCapabilities{Durable: true, Fenced: true})
	})
}

func TestOpenRefusesABadConfig(t *testing.T) {
	for name, c := range map[string]postgres.Config{
		"no dsn":           {Table: "docs"},
		"quoted table":     {DSN: "postgres://127.0.0.1:1/x", Table: `docs"; DROP TABLE x; --`},
		"too long a table": {DSN: "postgres://127.0.0.1:1/x", Table: "t23456789012345678901234567890123456789012345678901"},
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
