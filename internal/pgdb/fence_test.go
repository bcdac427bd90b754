package pgdb_test

import (
	"context"
	"errors"
	"math"
	"testing"

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
