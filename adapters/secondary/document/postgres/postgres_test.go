package postgres_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

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

// A table written before versions came from a sequence has none: opened,
// the sequence starts above the highest version left. And a document an
// engine of the older release wrote above the sequence, while it drained
// beside a new one, still gets a higher version at its next write.
func TestVersionsGoOnAboveWhatAnOlderReleaseWrote(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	cfg := postgres.Config{DSN: dsn, Table: pgtest.Table(t, dsn, "docupgrade", "", "_collections")}
	ctx := t.Context()
	open := func() *postgres.Store {
		store, err := postgres.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close() })
		return store
	}
	exec := func(sql string) {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	store := open()
	if err := store.EnsureCollection(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	var high ports.Document
	for range 3 {
		var err error
		if high, err = store.Put(ctx, "c", "high", nil, ports.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	_ = store.Close()
	exec("DROP SEQUENCE " + pgx.Identifier{cfg.Table + "_versions"}.Sanitize())

	store = open()
	d, err := store.Put(ctx, "c", "new", nil, ports.IfVersion(0))
	if err != nil || d.Version <= high.Version {
		t.Fatalf("a new document after the upgrade = %+v, %v; want a version above %d", d, err, high.Version)
	}
	exec("UPDATE " + pgx.Identifier{cfg.Table}.Sanitize() + " SET version = 1000 WHERE id = 'high'")
	if d, err := store.Put(ctx, "c", "high", nil, ports.Cond{}); err != nil || d.Version <= 1000 {
		t.Fatalf("a write over version 1000 = %+v, %v; want a version above it", d, err)
	}
	if d, err := store.Put(ctx, "c", "high", nil, ports.IfVersion(1001)); err != nil || d.Version <= 1001 {
		t.Fatalf("a conditional write over version 1001 = %+v, %v; want a version above it", d, err)
	}
}
