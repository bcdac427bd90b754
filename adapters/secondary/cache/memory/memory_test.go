package memory_test

import (
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/cache/memory"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

func TestCacheContract(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		contracttests.RunCache(t, contracttests.HarnessFunc[ports.Cache](func(t *testing.T) func(*testing.T) ports.Cache {
			store, err := memory.Open(t.Context(), memory.Config{})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			t.Cleanup(func() { store.Close() })
			return func(*testing.T) ports.Cache { return store }
		}))
	})
}
