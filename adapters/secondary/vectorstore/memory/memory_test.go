package memory_test

import (
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/vectorstore/memory"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

func TestVectorStoreContract(t *testing.T) {
	harness := func(c memory.Config) contracttests.Harness[ports.VectorStore] {
		return contracttests.HarnessFunc[ports.VectorStore](func(t *testing.T) func(*testing.T) ports.VectorStore {
			store, err := memory.Open(t.Context(), c)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			t.Cleanup(func() { store.Close() })
			return func(*testing.T) ports.VectorStore { return store }
		})
	}
	t.Run("memory", func(t *testing.T) {
		contracttests.RunVectorStore(t, harness(memory.Config{}), contracttests.VectorStoreCapabilities{})
	})
	// A threshold of 64 puts the suite's larger collections through the
	// HNSW graph, and its growing and shrinking ones across it.
	t.Run("memoryHNSW", func(t *testing.T) {
		contracttests.RunVectorStore(t, harness(memory.Config{IndexThreshold: 64}), contracttests.VectorStoreCapabilities{Approximate: true})
	})
}
