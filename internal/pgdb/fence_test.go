package pgdb_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	docpg "github.com/abi-engine/engine/adapters/secondary/document/postgres"
	kvpg "github.com/abi-engine/engine/adapters/secondary/keyvalue/postgres"
	"github.com/abi-engine/engine/internal/pgtest"
	"github.com/abi-engine/engine/internal/testenv"
	"github.com/abi-engine/engine/ports"
)

// The fence on the PostgreSQL stores: a write that carries an older serving
// term than the store has seen is refused and changes nothing; a newer one
// raises the fence; a write with no token is not fenced.

func term(ctx context.Context, token uint64) context.Context {
	return ports.WithFencingToken(ctx, token)
}

// openKV opens a PostgreSQL keyvalue store on a table of its own.
func openKV(t *testing.T, name string) *kvpg.Store {
	t.Helper()
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	kv, err := kvpg.Open(t.Context(), kvpg.Config{DSN: dsn, Table: pgtest.Table(t, dsn, name)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kv.Close() })
	return kv
}

func TestAKeyValueWriteOfAnOlderTermIsRefused(t *testing.T) {
	kv := openKV(t, "fencekv")
	ctx := t.Context()
	if err := kv.Set(term(ctx, 5), "k", []byte("term 5"), 0); err != nil {
		t.Fatalf("Set under term 5: %v", err)
	}
	if err := kv.Set(term(ctx, 7), "k", []byte("term 7"), 0); err != nil {
		t.Fatalf("Set under term 7: %v", err)
	}
	old := term(ctx, 5)
	writes := map[string]func() error{
		"Set":           func() error { return kv.Set(old, "k", []byte("stale"), 0) },
		"SetIfAbsent":   func() error { _, err := kv.SetIfAbsent(old, "new", []byte("stale"), 0); return err },
		"Delete":        func() error { _, err := kv.Delete(old, "k"); return err },
		"DeleteIfValue": func() error { _, err := kv.DeleteIfValue(old, "k", []byte("term 7")); return err },
	}
	for name, write := range writes {
		if err := write(); !errors.Is(err, ports.ErrFenced) {
			t.Errorf("%s under term 5 after term 7: err %v, want ErrFenced", name, err)
		}
	}
	if v, err := kv.Get(ctx, "k"); err != nil || string(v) != "term 7" {
		t.Fatalf("Get = %q, %v; want the value of term 7", v, err)
	}
	if ok, _ := kv.Exists(ctx, "new"); ok {
		t.Fatalf("a refused SetIfAbsent wrote its key")
	}
	if err := kv.Set(term(ctx, 7), "k", []byte("term 7 again"), 0); err != nil {
		t.Fatalf("Set under the current term: %v", err)
	}
	if err := kv.Set(ctx, "k", []byte("no token"), 0); err != nil {
		t.Fatalf("Set with no token: %v", err)
	}
}

func TestADocumentWriteOfAnOlderTermIsRefused(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	docs, err := docpg.Open(t.Context(), docpg.Config{DSN: dsn, Table: pgtest.Table(t, dsn, "fencedoc", "", "_collections")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = docs.Close() })
	ctx := t.Context()
	if err := docs.EnsureCollection(term(ctx, 3), "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := docs.Put(term(ctx, 4), "c", "d", map[string]any{"by": "term 4"}, ports.Cond{}); err != nil {
		t.Fatalf("Put under term 4: %v", err)
	}
	old := term(ctx, 3)
	if _, err := docs.Put(old, "c", "d", map[string]any{"by": "term 3"}, ports.Cond{}); !errors.Is(err, ports.ErrFenced) {
		t.Errorf("Put under term 3 after term 4: err %v, want ErrFenced", err)
	}
	if err := docs.Delete(old, "c", "d", ports.Cond{}); !errors.Is(err, ports.ErrFenced) {
		t.Errorf("Delete under term 3 after term 4: err %v, want ErrFenced", err)
	}
	if err := docs.DropCollection(old, "c"); !errors.Is(err, ports.ErrFenced) {
		t.Errorf("DropCollection under term 3 after term 4: err %v, want ErrFenced", err)
	}
	d, err := docs.Get(ctx, "c", "d")
	if err != nil || d.Data["by"] != "term 4" {
		t.Fatalf("Get = %+v, %v; want the document of term 4", d, err)
	}
}

// A token beyond bigint is refused as bad input, as the SQLite stores
// refuse it, and writes nothing. Before, it was cast to a negative term,
// and a store with no fence yet wrote under it. Lease revisions do not
// come near 2^63; the stores agree on what they refuse all the same.
func TestATokenBeyondBigintIsRefusedAsBadInput(t *testing.T) {
	kv := openKV(t, "fencebig")
	huge := term(t.Context(), math.MaxInt64+1)
	if err := kv.Set(huge, "k", []byte("v"), 0); !errors.Is(err, ports.ErrInvalidArgument) {
		t.Fatalf("Set under token 2^63: %v, want ErrInvalidArgument", err)
	}
	if _, err := kv.SetIfAbsent(huge, "k", []byte("v"), 0); !errors.Is(err, ports.ErrInvalidArgument) {
		t.Fatalf("SetIfAbsent under token 2^63: %v, want ErrInvalidArgument", err)
	}
	if ok, err := kv.Exists(t.Context(), "k"); err != nil || ok {
		t.Fatalf("after the refused writes the key exists: %v, %v", ok, err)
	}
}

// A write of an older term that has passed its check holds the fence row
// in share mode until its transaction ends, which an engine paused (or cut
// off) halfway through sending a large write can keep from happening for
// as long as the pause lasts. The newer term's writes, which must raise
// the row, wait for it no longer than a bound of the fence's own, even
// under a context with no deadline, as an engine's calls run: each fails
// as not done, and is taken once the older write has ended.
func TestANewTermsWriteGivesUpWaitingOnAFenceRowAnOlderWriteHolds(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	// Each opens a store on a table of its own, writes to it under term 5,
	// and returns the table and the write to make under term 7.
	stores := map[string]func(t *testing.T) (string, func(context.Context) error){
		"keyvalue Set": func(t *testing.T) (string, func(context.Context) error) {
			table, kv := openKVOn(t, dsn, "fenceheldset")
			return table, func(ctx context.Context) error { return kv.Set(ctx, "k", []byte("term 7"), 0) }
		},
		"keyvalue SetIfAbsent": func(t *testing.T) (string, func(context.Context) error) {
			table, kv := openKVOn(t, dsn, "fenceheldsia")
			return table, func(ctx context.Context) error {
				_, err := kv.SetIfAbsent(ctx, "new", []byte("term 7"), 0)
				return err
			}
		},
		"document Put": func(t *testing.T) (string, func(context.Context) error) {
			table := pgtest.Table(t, dsn, "fencehelddoc", "", "_collections")
			docs, err := docpg.Open(t.Context(), docpg.Config{DSN: dsn, Table: table})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = docs.Close() })
			if err := docs.EnsureCollection(term(t.Context(), 5), "c"); err != nil {
				t.Fatal(err)
			}
			return table, func(ctx context.Context) error {
				_, err := docs.Put(ctx, "c", "d", map[string]any{"by": "term 7"}, ports.Cond{})
				return err
			}
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			scope, write := open(t)
			conn, err := pgx.Connect(t.Context(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close(context.Background()) })
			older, err := conn.Begin(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = older.Rollback(context.Background()) })
			// As a check of term 5 that passed holds the row.
			if _, err := older.Exec(t.Context(), "SELECT 1 FROM abi_engine_fence WHERE scope = $1 FOR SHARE", scope); err != nil {
				t.Fatal(err)
			}

			done := make(chan error, 1)
			go func() { done <- write(term(t.Context(), 7)) }()
			select {
			case err := <-done:
				if !errors.Is(err, ports.ErrNotDone) {
					t.Fatalf("a write of term 7 behind a held check of term 5: %v, want ErrNotDone", err)
				}
			case <-time.After(2 * time.Minute):
				t.Fatal("a write of term 7 waited on the fence row an older write holds without end")
			}

			if err := older.Rollback(t.Context()); err != nil {
				t.Fatal(err)
			}
			if err := write(term(t.Context(), 7)); err != nil {
				t.Fatalf("the write of term 7 once the older write ended: %v", err)
			}
		})
	}
}

// openKVOn opens a PostgreSQL keyvalue store on a table of its own, named
// after name, with a key written under term 5; it returns the table too.
func openKVOn(t *testing.T, dsn, name string) (string, *kvpg.Store) {
	t.Helper()
	table := pgtest.Table(t, dsn, name)
	kv, err := kvpg.Open(t.Context(), kvpg.Config{DSN: dsn, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kv.Close() })
	if err := kv.Set(term(t.Context(), 5), "k", []byte("term 5"), 0); err != nil {
		t.Fatal(err)
	}
	return table, kv
}

// The check bounds its own wait for the fence row only: the write after
// it, in the same transaction, waits for its rows as long as the session
// says (lock_timeout), as it did before the check had a bound.
func TestTheFenceCheckLeavesLockTimeoutAsItWas(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	table, _ := openKVOn(t, dsn, "fencelocktimeout")
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	for _, session := range []string{"0", "2min", "50ms"} {
		var after string
		err := pgx.BeginFunc(t.Context(), conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(t.Context(), "SELECT set_config('lock_timeout', $1, true)", session); err != nil {
				return err
			}
			if _, err := tx.Exec(t.Context(), "SELECT abi_engine_fence_check($1, 5, 1000)", table); err != nil {
				return err
			}
			return tx.QueryRow(t.Context(), "SELECT current_setting('lock_timeout')").Scan(&after)
		})
		if err != nil {
			t.Fatal(err)
		}
		if after != session {
			t.Errorf("lock_timeout %s before the check reads %s after it", session, after)
		}
	}
}
