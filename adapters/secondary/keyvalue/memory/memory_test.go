package memory_test

import (
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

func TestKeyValueContract(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		contracttests.RunKeyValue(t, contracttests.HarnessFunc[ports.KeyValue](func(t *testing.T) func(*testing.T) ports.KeyValue {
			store, err := memory.Open(t.Context(), memory.Config{})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			t.Cleanup(func() { _ = store.Close() })
			return func(*testing.T) ports.KeyValue { return store }
		}), contracttests.KeyValueCapabilities{})
	})
}
