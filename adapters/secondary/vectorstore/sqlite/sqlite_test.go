package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/vectorstore/sqlite"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/internal/sqlitedb"
	"github.com/abi-engine/engine/ports"
)

func TestVectorStoreContract(t *testing.T) {
	harness := func(threshold int) contracttests.Harness[ports.VectorStore] {
		return contracttests.HarnessFunc[ports.VectorStore](func(t *testing.T) func(*testing.T) ports.VectorStore {
			path := filepath.Join(t.TempDir(), "data", "vectors.sqlite")
			return func(t *testing.T) ports.VectorStore {
				store, err := sqlite.Open(t.Context(), sqlite.Config{Path: path, IndexThreshold: threshold})
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				t.Cleanup(func() { store.Close() })
				return store
			}
		})
	}
	t.Run("sqlite", func(t *testing.T) {
		contracttests.RunVectorStore(t, harness(0), contracttests.VectorStoreCapabilities{Fenced: true})
	})
	// A threshold of 64 puts the suite's larger collections through the
	// HNSW graph, and its growing and shrinking ones across it.
	t.Run("sqliteHNSW", func(t *testing.T) {
		contracttests.RunVectorStore(t, harness(64), contracttests.VectorStoreCapabilities{Approximate: true, Fenced: true})
	})
}

func TestOpenRejectsABadPath(t *testing.T) {
	for _, path := range []string{"", filepath.Join(t.TempDir(), "what?.sqlite")} {
		if _, err := sqlite.Open(t.Context(), sqlite.Config{Path: path}); !errors.Is(err, ports.ErrInvalidArgument) {
			t.Errorf("Open(%q): err %v, want ErrInvalidArgument", path, err)
		}
	}
}

func TestDataSurvivesReopening(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vectors.sqlite")
	s, err := sqlite.Open(t.Context(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := s.CreateCollection(t.Context(), "docs", 2, ports.MetricDot); err != nil {
		t.Fatalf("CreateCollection: %v", err)
	}
	if err := s.Upsert(t.Context(), "docs", []ports.Vector{{ID: "a", Values: []float32{1, 2}, Payload: map[string]any{"k": "v"}}}); err != nil {
		t.Fatalf("Upsert: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no file at %s: %v", path, err)
	}
	s, err = sqlite.Open(t.Context(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	v, err := s.Get(t.Context(), "docs", "a")
	if err != nil || v.Payload["k"] != "v" || len(v.Values) != 2 || v.Values[1] != 2 {
		t.Fatalf("after reopening, Get gives %+v, %v", v, err)
	}
}

func TestLocalStorageNamesTheFile(t *testing.T) {
	if got, want := (sqlite.Config{Path: ".engine/vectors.sqlite"}).LocalStorage(), "SQLite at .engine/vectors.sqlite"; got != want {
		t.Fatalf("LocalStorage() = %q, want %q", got, want)
	}
}

// A file written before the write counter existed opens, gains the
// counter's columns, and searches what it held.
func TestAFileFromBeforeTheWriteCounterOpens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vectors.sqlite")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	for _, q := range []string{
		`CREATE TABLE vector_collections (name TEXT PRIMARY KEY, dimension INTEGER NOT NULL, metric TEXT NOT NULL)`,
		`CREATE TABLE vectors (collection TEXT NOT NULL, id TEXT NOT NULL, vec BLOB NOT NULL, payload TEXT, PRIMARY KEY (collection, id)) WITHOUT ROWID`,
		`INSERT INTO vector_collections VALUES ('docs', 2, 'euclid')`,
		`INSERT INTO vectors VALUES ('docs', 'a', x'0000803f00000000', '{"k":"v"}')`, // [1, 0]
		`INSERT INTO vectors VALUES ('docs', 'b', x'000000000000803f', NULL)`,        // [0, 1]
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	s, err := sqlite.Open(t.Context(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatalf("Open of an older file: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	got, err := s.Search(t.Context(), "docs", []float32{1, 0.1}, 2, nil)
	if err != nil || len(got) != 2 || got[0].ID != "a" || got[0].Payload["k"] != "v" {
		t.Fatalf("Search in an older file gives %+v, %v; want a then b", got, err)
	}
	if err := s.Delete(t.Context(), "docs", []string{"a"}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := s.Upsert(t.Context(), "docs", []ports.Vector{{ID: "c", Values: []float32{1, 0.2}}}); err != nil {
		t.Fatalf("Upsert: %v", err)
	}
	got, err = s.Search(t.Context(), "docs", []float32{1, 0.1}, 5, nil)
	if err != nil || len(got) != 2 || got[0].ID != "c" || got[1].ID != "b" {
		t.Fatalf("after a delete and an upsert, Search gives %+v, %v; want c then b", got, err)
	}
}

// A vector file, like the other SQLite files of a data_dir, belongs to the
// NATS account whose engine opened it first: an engine of another account
// is refused it, and one of the same account opens it again (ADR 0016).
func TestAFileOfAnotherAccountIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vectors.sqlite")
	as := func(account string) error {
		ctx := ports.WithAccount(t.Context(), func(context.Context) (string, error) { return account, nil })
		store, err := sqlite.Open(ctx, sqlite.Config{Path: path})
		if err != nil {
			return err
		}
		return store.Close()
	}
	if err := as("TEAM_A"); err != nil {
		t.Fatalf("the first account's open: %v", err)
	}
	if err := as("TEAM_B"); !errors.Is(err, sqlitedb.ErrOtherAccount) {
		t.Fatalf("another account's open: %v, want ErrOtherAccount", err)
	}
	if err := as("TEAM_A"); err != nil {
		t.Fatalf("the first account's open again: %v", err)
	}
}
