package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

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
	d, err = store.Put(ctx, "c", "high", nil, ports.Cond{})
	if err != nil || d.Version <= 1000 {
		t.Fatalf("a write over version 1000 = %+v, %v; want a version above it", d, err)
	}
	exec("UPDATE " + pgx.Identifier{cfg.Table}.Sanitize() + " SET version = 9000000000000000 WHERE id = 'high'")
	if d, err := store.Put(ctx, "c", "high", nil, ports.IfVersion(9000000000000000)); err != nil || d.Version <= 9000000000000000 {
		t.Fatalf("a conditional write over version 9000000000000000 = %+v, %v; want a version above it", d, err)
	}
}

// Engines opening one table at once, fresh and from before the sequence,
// all open, and their writes never share a version.
func TestEnginesOpeningATableAtOnceNeverShareAVersion(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	cfg := postgres.Config{DSN: dsn, Table: pgtest.Table(t, dsn, "docrace", "", "_collections")}
	ctx := t.Context()
	openAll := func() []*postgres.Store {
		const n = 6
		stores := make([]*postgres.Store, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { stores[i], errs[i] = postgres.Open(ctx, cfg) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("open %d: %v", i, err)
			}
			t.Cleanup(func() { _ = stores[i].Close() })
		}
		return stores
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
	stores := openAll()
	if err := stores[0].EnsureCollection(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	var mu sync.Mutex
	putAll := func(stores []*postgres.Store, id string) {
		var wg sync.WaitGroup
		for _, s := range stores {
			wg.Go(func() {
				for range 20 {
					d, err := s.Put(ctx, "c", id, nil, ports.Cond{})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					if seen[d.Version] {
						t.Errorf("version %d given twice", d.Version)
					}
					seen[d.Version] = true
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	putAll(stores, "d")
	for _, s := range stores {
		_ = s.Close()
	}
	exec("DROP SEQUENCE " + pgx.Identifier{cfg.Table + "_versions"}.Sanitize())
	stores = openAll()
	putAll(stores, "e")
	for _, s := range stores {
		_ = s.Close()
	}
}

// A table from before the sequence knows nothing of the documents it
// deleted: x, deleted there at version 3 with nothing left, made again
// after the upgrade, must not be given 3 or below.
func TestAnUpgradedTableNeverGivesADeletedDocumentsVersionAgain(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	cfg := postgres.Config{DSN: dsn, Table: pgtest.Table(t, dsn, "docupdel", "", "_collections")}
	ctx := t.Context()
	store, err := postgres.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.EnsureCollection(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	_ = store.Close()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"DROP SEQUENCE " + pgx.Identifier{cfg.Table + "_versions"}.Sanitize(),
		"INSERT INTO " + pgx.Identifier{cfg.Table}.Sanitize() + " (collection, id, version, data) VALUES ('c', 'x', 3, '{}')",
		"DELETE FROM " + pgx.Identifier{cfg.Table}.Sanitize()} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	_ = conn.Close(ctx)
	store, err = postgres.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	d, err := store.Put(ctx, "c", "x", nil, ports.IfVersion(0))
	if err != nil {
		t.Fatal(err)
	}
	if d.Version <= 3 {
		t.Fatalf("x, deleted at version 3 before the upgrade, made again at version %d", d.Version)
	}
}

// An unconditional put takes a version from the sequence before it meets
// the row. If another put of the document (held here in a transaction, as
// a slow statement would be) commits a later one first, the put must not
// settle on one more than that, a version the sequence has not passed:
// deleted and made again, the document would be given it a second time.
func TestAPutThatWaitedForTheRowTakesAVersionAfterIt(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	cfg := postgres.Config{DSN: dsn, Table: pgtest.Table(t, dsn, "docstale", "", "_collections")}
	ctx := t.Context()
	store, err := postgres.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if err := store.EnsureCollection(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	first, err := store.Put(ctx, "c", "x", nil, ports.IfVersion(0))
	if err != nil {
		t.Fatal(err)
	}
	docs, seq := pgx.Identifier{cfg.Table}.Sanitize(), pgx.Identifier{cfg.Table + "_versions"}.Sanitize()
	// The other writer locks x (its statement has begun).
	other, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1 FROM "+docs+" WHERE collection = 'c' AND id = 'x' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	// This writer takes its nextval and waits for the row.
	type result struct {
		d   ports.Document
		err error
	}
	done := make(chan result, 1)
	go func() {
		d, err := store.Put(ctx, "c", "x", map[string]any{"w": "a"}, ports.Cond{})
		done <- result{d, err}
	}()
	// Wait until it waits on the lock.
	watch, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(ctx)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the put never waited for the row")
		}
		var waiting bool
		if err := watch.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%INSERT INTO "+docs+"%')").Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
	}
	// The other writer's put, as the adapter writes it, commits first.
	if _, err := tx.Exec(ctx, "UPDATE "+docs+" SET version = GREATEST(nextval('"+seq+"'), version + 1), data = '{}' WHERE collection = 'c' AND id = 'x' AND version = $1", int64(first.Version)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := store.Delete(ctx, "c", "x", ports.IfVersion(r.d.Version)); err != nil {
		t.Fatal(err)
	}
	again, err := store.Put(ctx, "c", "x", nil, ports.IfVersion(0))
	if err != nil {
		t.Fatal(err)
	}
	if again.Version <= r.d.Version {
		t.Fatalf("x written at version %d, deleted, and made again at version %d: a writer holding %d overwrites it", r.d.Version, again.Version, r.d.Version)
	}
}

// A find or count whose collection is dropped while it runs answers that
// the collection is not found, never an empty page or a count of 0: the
// collection never was there and empty. The test holds the documents'
// table locked until the call waits on it, and drops the collection then.
func TestAFindOrCountDuringADropOfItsCollectionIsNotFound(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	cfg := postgres.Config{DSN: dsn, Table: pgtest.Table(t, dsn, "docdrop", "", "_collections")}
	ctx := t.Context()
	store, err := postgres.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	docs, collections := pgx.Identifier{cfg.Table}.Sanitize(), pgx.Identifier{cfg.Table + "_collections"}.Sanitize()
	watch, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = watch.Close(context.Background()) })
	for name, call := range map[string]func() error{
		"find": func() error {
			found, next, err := store.Find(ctx, "c", ports.Query{})
			if err == nil {
				return fmt.Errorf("%d documents, cursor %q", len(found), next)
			}
			return err
		},
		"count": func() error {
			n, err := store.Count(ctx, "c", nil)
			if err == nil {
				return fmt.Errorf("count %d", n)
			}
			return err
		},
	} {
		if err := store.EnsureCollection(ctx, "c"); err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			if _, err := store.Put(ctx, "c", fmt.Sprint(i), map[string]any{"n": i}, ports.Cond{}); err != nil {
				t.Fatal(err)
			}
		}
		dropper, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		tx, err := dropper.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "LOCK TABLE "+docs+" IN ACCESS EXCLUSIVE MODE"); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- call() }()
		deadline := time.Now().Add(30 * time.Second)
		for waiting := false; !waiting; {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no call waited on the documents' table within 30 s", name)
			}
			if err := watch.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE relation = $1::regclass AND NOT granted)", docs).Scan(&waiting); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := tx.Exec(ctx, "DELETE FROM "+collections+" WHERE name = 'c'"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		_ = dropper.Close(ctx)
		select {
		case err := <-done:
			if !errors.Is(err, ports.ErrNotFound) {
				t.Errorf("%s during a drop of its collection: %v; want ErrNotFound", name, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s during a drop of its collection had not answered 30 s after it", name)
		}
	}
}

// A put PostgreSQL has no room for (disk_full) is refused as
// ports.ErrStorageFull, which the API answers 507, and the document keeps
// what it held. Before, it was a 500 like any other failure.
func TestAPutToAFullDiskIsRefusedAsStorageFull(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	table := pgtest.Table(t, dsn, "docfull", "", "_collections")
	s, err := postgres.Open(t.Context(), postgres.Config{DSN: dsn, Table: table})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.EnsureCollection(t.Context(), "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(t.Context(), "c", "d", map[string]any{"n": 1.0}, ports.Cond{}); err != nil {
		t.Fatal(err)
	}
	pgtest.DiskFull(t, dsn, table)
	if _, err := s.Put(t.Context(), "c", "d", map[string]any{"n": 2.0}, ports.Cond{}); !errors.Is(err, ports.ErrStorageFull) {
		t.Fatalf("Put on a full disk: %v, want ErrStorageFull", err)
	}
	if d, err := s.Get(t.Context(), "c", "d"); err != nil || d.Data["n"] != 1.0 {
		t.Fatalf("Get after the refused put: %+v %v, want the document as it was", d, err)
	}
}

// A write the server rolls back to break a deadlock did not happen, and
// may be sent again: it fails as ports.ErrNotDone, and the document is as
// it was.
func TestAWriteRolledBackForADeadlockIsNotDone(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	writes := map[string]func(s *postgres.Store, term context.Context) error{
		"Put": func(s *postgres.Store, term context.Context) error {
			_, err := s.Put(term, "c", "d", map[string]any{"n": 2.0}, ports.Cond{})
			return err
		},
		"Delete": func(s *postgres.Store, term context.Context) error { return s.Delete(term, "c", "d", ports.Cond{}) },
	}
	for name, write := range writes {
		t.Run(name, func(t *testing.T) {
			table := pgtest.Table(t, dsn, "docdeadlock", "", "_collections")
			s, err := postgres.Open(t.Context(), postgres.Config{DSN: dsn, Table: table})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			t.Cleanup(func() { _ = s.Close() })
			term := ports.WithFencingToken(t.Context(), 5)
			if err := s.EnsureCollection(term, "c"); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Put(term, "c", "d", map[string]any{"n": 1.0}, ports.Cond{}); err != nil {
				t.Fatal(err)
			}
			hold := "SELECT 1 FROM " + pgx.Identifier{table}.Sanitize() + " WHERE collection = 'c' AND id = 'd' FOR UPDATE"
			reset := func() {
				if _, err := s.Put(term, "c", "d", map[string]any{"n": 1.0}, ports.Cond{}); err != nil {
					t.Fatal(err)
				}
			}
			err = pgtest.Deadlocked(t, dsn, table, hold, func() error { return write(s, term) }, reset)
			if !errors.Is(err, ports.ErrNotDone) {
				t.Fatalf("a %s the server rolled back for a deadlock: %v, want ErrNotDone", name, err)
			}
			if d, err := s.Get(t.Context(), "c", "d"); err != nil || d.Data["n"] != 1.0 {
				t.Fatalf("the document after a %s rolled back: %+v %v, want it as it was", name, d, err)
			}
		})
	}
}
