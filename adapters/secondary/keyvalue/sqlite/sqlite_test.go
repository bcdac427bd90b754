package sqlite_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/keyvalue/sqlite"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

func TestKeyValueContract(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		contracttests.RunKeyValue(t, contracttests.HarnessFunc[ports.KeyValue](func(t *testing.T) func(*testing.T) ports.KeyValue {
			path := filepath.Join(t.TempDir(), "data", "kv.sqlite")
			return func(t *testing.T) ports.KeyValue {
				store, err := sqlite.Open(t.Context(), sqlite.Config{Path: path})
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				t.Cleanup(func() { _ = store.Close() })
				return store
			}
		}), contracttests.KeyValueCapabilities{Durable: true, Fenced: true, KeepsReads: true})
	})
}

func TestOpenNeedsAPath(t *testing.T) {
	if _, err := sqlite.Open(t.Context(), sqlite.Config{}); !errors.Is(err, ports.ErrInvalidArgument) {
		t.Fatalf("Open without a path: err %v, want ErrInvalidArgument", err)
	}
}

func TestLocalStorageNamesTheFile(t *testing.T) {
	if got, want := (sqlite.Config{Path: ".engine/kv.sqlite"}).LocalStorage(), "SQLite at .engine/kv.sqlite"; got != want {
		t.Fatalf("LocalStorage = %q, want %q", got, want)
	}
}
