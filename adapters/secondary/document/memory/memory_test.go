package memory_test

import (
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/document/memory"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

func TestDocumentContract(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		contracttests.RunDocument(t, contracttests.HarnessFunc[ports.DocumentStore](func(t *testing.T) func(*testing.T) ports.DocumentStore {
			store, err := memory.Open(t.Context(), memory.Config{})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			t.Cleanup(func() { _ = store.Close() })
			return func(*testing.T) ports.DocumentStore { return store }
		}), contracttests.DocumentCapabilities{})
	})
}
