package memory_test

import (
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/vectorstore/memory"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

func TestVectorStoreContract(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		contracttests.RunVectorStore(t, contracttests.HarnessFunc[ports.VectorStore](func(t *testing.T) func(*testing.T) ports.VectorStore {
			store, err := memory.Open(t.Context(), memory.Config{})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			t.Cleanup(func() { store.Close() })
			return func(*testing.T) ports.VectorStore { return store }
		}), contracttests.VectorStoreCapabilities{})
	})
}
