package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	docpostgres "github.com/abi-engine/engine/adapters/secondary/document/postgres"
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

// The contract holds for calls under a term, as the engine makes them, so
// through the kept reads and the fenced batches of sets: the suite's
// handles are views of one handle, since one engine serves a term.
func TestKeyValueContractUnderATerm(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	contracttests.RunKeyValue(t, contracttests.HarnessFunc[ports.KeyValue](func(t *testing.T) func(*testing.T) ports.KeyValue {
		s, err := postgres.Open(t.Context(), postgres.Config{DSN: dsn, Table: pgtest.Table(t, dsn, "kvterm")})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return func(*testing.T) ports.KeyValue { return contracttests.UnderTerm{KV: s, Token: 11} }
	}), contracttests.KeyValueCapabilities{Durable: true}) // the views share one term, so the fencing cases cannot run on them
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

// A set whose caller gives up while the server still holds it may land
// after the caller has returned; a read in between would keep the value
// before it for the rest of the term. The key is kept no more in that
// term. Here another connection holds the table's fence row, so the set's
// check of the fence waits past its caller's deadline, and the set is in
// flight when its caller gives up. (A row of the table held elsewhere
// would not do: a batch waits for a row no longer than its first caller
// does, and the server's refusal would tell the caller its set was not
// written.)
func TestASetWhoseCallerGaveUpKeepsItsKeyOut(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	table := pgtest.Table(t, dsn, "kvgaveup")
	s, err := postgres.Open(t.Context(), postgres.Config{DSN: dsn, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	term := ports.WithFencingToken(t.Context(), 3)
	if err := s.Set(term, "k", []byte("v0"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(term, "k"); err != nil {
		t.Fatal(err)
	}
	if _, kept, _ := s.QuickGet(term, "k"); !kept {
		t.Fatal("a value read under a term is not kept")
	}
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), "SELECT 1 FROM abi_engine_fence WHERE scope = $1 FOR UPDATE", table); err != nil {
		t.Fatal(err)
	}
	soon, cancel := context.WithTimeout(term, 300*time.Millisecond)
	defer cancel()
	if err := s.Set(soon, "k", []byte("v1"), 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a set whose fence check waits past its deadline: %v, want DeadlineExceeded", err)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(term, "k"); err != nil {
		t.Fatal(err)
	}
	if v, kept, _ := s.QuickGet(term, "k"); kept {
		t.Fatalf("after a set of unknown outcome, a read of its key was kept (%q)", v)
	}
	// Another key is kept as before, and a newer term keeps this one.
	if _, err := s.Get(ports.WithFencingToken(t.Context(), 4), "k"); err != nil {
		t.Fatal(err)
	}
	if _, kept, _ := s.QuickGet(ports.WithFencingToken(t.Context(), 4), "k"); !kept {
		t.Fatal("a newer term does not keep the key again")
	}
}

// The PostgreSQL document store keeps, beside its table, the relations
// <table>_collections and <table>_versions. A keyvalue table named like
// one of them meets the document store's relation in a shared database:
// CREATE TABLE IF NOT EXISTS then keeps whichever came first, and every
// call of the store that came second fails. The name is refused by the
// config check and by Open, before anything is created.
func TestAKeyValueTableNamedLikeADocumentStoresOwnIsRefused(t *testing.T) {
	for _, table := range []string{"engine_documents_collections", "engine_documents_versions"} {
		err := postgres.Config{DSN: "postgres://127.0.0.1:1/x", Table: table}.Check("services.keyvalue.config")
		if !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), "services.keyvalue.config.table") {
			t.Errorf("config check of table %q: %v, want ErrInvalidArgument naming services.keyvalue.config.table", table, err)
		}
	}
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	base := pgtest.Table(t, dsn, "kvbeside", "", "_collections")
	docs, err := docpostgres.Open(t.Context(), docpostgres.Config{DSN: dsn, Table: base})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = docs.Close() })
	for _, suffix := range []string{"_collections", "_versions"} {
		kv, err := postgres.Open(t.Context(), postgres.Config{DSN: dsn, Table: base + suffix})
		if err == nil {
			serr := kv.Set(t.Context(), "k", []byte("v"), 0)
			kv.Close()
			t.Errorf("Open of keyvalue table %q beside document table %q succeeded, and a Set then failed: %v", base+suffix, base, serr)
			continue
		}
		if !errors.Is(err, ports.ErrInvalidArgument) {
			t.Errorf("Open of keyvalue table %q: %v, want ErrInvalidArgument", base+suffix, err)
		}
	}
}

// Every store in a database checks its writes against the one fence table,
// abi_engine_fence, which the stores make as they open. A store's table of
// that name takes its place, or the store opens on it: CREATE TABLE IF NOT
// EXISTS keeps whichever came first, and every fenced write of every store
// in the database then fails. The name is refused for both PostgreSQL
// stores, by the config check and by Open, before anything is created. The
// stores open here in a schema of the test's own, so that the fence the
// other tests share is never touched.
func TestAStoreTableNamedLikeTheFenceTableIsRefused(t *testing.T) {
	const fence = "abi_engine_fence"
	if err := (postgres.Config{DSN: "postgres://127.0.0.1:1/x", Table: fence}).Check("services.keyvalue.config"); !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), "services.keyvalue.config.table") {
		t.Errorf("keyvalue config check of table %q: %v, want ErrInvalidArgument naming services.keyvalue.config.table", fence, err)
	}
	if err := (docpostgres.Config{DSN: "postgres://127.0.0.1:1/x", Table: fence}).Check("services.document.config"); !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), "services.document.config.table") {
		t.Errorf("document config check of table %q: %v, want ErrInvalidArgument naming services.document.config.table", fence, err)
	}

	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	schema := pgtest.Table(t, dsn, "fencename")
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, dsn); err == nil {
			_, _ = c.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			_ = c.Close(ctx)
		}
	})
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	own := dsn + sep + "search_path=" + schema

	term := ports.WithFencingToken(t.Context(), 1)
	if kv, err := postgres.Open(t.Context(), postgres.Config{DSN: own, Table: fence}); err == nil {
		serr := kv.Set(term, "k", []byte("v"), 0)
		_ = kv.Close()
		t.Errorf("Open of keyvalue table %q succeeded, and a fenced Set then returned %v", fence, serr)
	} else if !errors.Is(err, ports.ErrInvalidArgument) {
		t.Errorf("Open of keyvalue table %q: %v, want ErrInvalidArgument", fence, err)
	}
	if docs, err := docpostgres.Open(t.Context(), docpostgres.Config{DSN: own, Table: fence}); err == nil {
		derr := docs.EnsureCollection(term, "c")
		_ = docs.Close()
		t.Errorf("Open of document table %q succeeded, and a fenced write then returned %v", fence, derr)
	} else if !errors.Is(err, ports.ErrInvalidArgument) {
		t.Errorf("Open of document table %q: %v, want ErrInvalidArgument", fence, err)
	}
}

// A keyvalue table of the same name as a document store's table, in a
// database both use, is the document store's: CREATE TABLE IF NOT EXISTS
// keeps it, and every call of the keyvalue store would then fail on its
// columns. Open refuses a table it finds of another shape, naming it, so
// the clash shows at the start rather than at every call.
func TestAKeyValueTableNamedLikeADocumentTableIsRefusedAtOpen(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	table := pgtest.Table(t, dsn, "kvsamedoc", "", "_collections")
	docs, err := docpostgres.Open(t.Context(), docpostgres.Config{DSN: dsn, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = docs.Close() })
	kv, err := postgres.Open(t.Context(), postgres.Config{DSN: dsn, Table: table})
	if err == nil {
		serr := kv.Set(t.Context(), "k", []byte("v"), 0)
		_ = kv.Close()
		t.Fatalf("Open of keyvalue table %q, the document store's table, succeeded, and a Set then returned %v", table, serr)
	}
	if !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), table) {
		t.Fatalf("Open of keyvalue table %q, the document store's table: %v, want ErrInvalidArgument naming the table", table, err)
	}
}

// A write PostgreSQL has no room for (disk_full) is refused as
// ports.ErrStorageFull, which the API answers 507, and what the table held
// stays. Before, it was a 500 like any other failure.
func TestAWriteToAFullDiskIsRefusedAsStorageFull(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	table := pgtest.Table(t, dsn, "kvfull")
	s, err := postgres.Open(t.Context(), postgres.Config{DSN: dsn, Table: table})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Set(t.Context(), "kept", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	pgtest.DiskFull(t, dsn, table)
	if err := s.Set(t.Context(), "k", []byte("v"), 0); !errors.Is(err, ports.ErrStorageFull) {
		t.Fatalf("Set on a full disk: %v, want ErrStorageFull", err)
	}
	if ok, err := s.SetIfAbsent(t.Context(), "k", []byte("v"), 0); ok || !errors.Is(err, ports.ErrStorageFull) {
		t.Fatalf("SetIfAbsent on a full disk: %v %v, want false, ErrStorageFull", ok, err)
	}
	if v, err := s.Get(t.Context(), "kept"); err != nil || string(v) != "v" {
		t.Fatalf("Get of the key set before: %q %v", v, err)
	}
}

// A write the server refuses (here a value a check constraint on the table
// refuses) rolled back and wrote nothing: its outcome is known, and a read
// of its key under the term is kept again, where one after a write of
// unknown outcome is not.
func TestAWriteTheServerRefusedLeavesItsKeyKept(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	table := pgtest.Table(t, dsn, "kvrefused")
	s, err := postgres.Open(t.Context(), postgres.Config{DSN: dsn, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	term := ports.WithFencingToken(t.Context(), 3)
	if err := s.Set(term, "k", []byte("v0"), 0); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), "ALTER TABLE "+pgx.Identifier{table}.Sanitize()+" ADD CHECK (value <> 'refused'::bytea)"); err != nil {
		t.Fatal(err)
	}
	writes := map[string]func() error{
		"Set":         func() error { return s.Set(term, "k", []byte("refused"), 0) },
		"SetIfAbsent": func() error { _, err := s.SetIfAbsent(term, "k", []byte("refused"), time.Millisecond); return err },
	}
	for name, write := range writes {
		var pgErr *pgconn.PgError
		if err := write(); !errors.As(err, &pgErr) || pgErr.Code != "23514" {
			t.Fatalf("%s of a value the table refuses: %v, want a check violation", name, err)
		}
		if v, err := s.Get(term, "k"); err != nil || string(v) != "v0" {
			t.Fatalf("k after a refused %s = %q, %v; want v0", name, v, err)
		}
		if _, kept, _ := s.QuickGet(term, "k"); !kept {
			t.Fatalf("after a %s the server refused, a read of its key is not kept", name)
		}
	}
}
