package sqlite_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/vectorstore/sqlite"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

func TestVectorStoreContract(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		contracttests.RunVectorStore(t, contracttests.HarnessFunc[ports.VectorStore](func(t *testing.T) func(*testing.T) ports.VectorStore {
			path := filepath.Join(t.TempDir(), "data", "vectors.sqlite")
			return func(t *testing.T) ports.VectorStore {
				store, err := sqlite.Open(t.Context(), sqlite.Config{Path: path})
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				t.Cleanup(func() { store.Close() })
				return store
			}
		}), contracttests.VectorStoreCapabilities{})
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
