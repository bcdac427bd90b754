package memory_test

import (
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/objectstorage/memory"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

func TestObjectStorageContract(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		contracttests.RunObjectStorage(t, contracttests.HarnessFunc[ports.ObjectStorage](func(t *testing.T) func(*testing.T) ports.ObjectStorage {
			store, err := memory.Open(t.Context(), memory.Config{})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			t.Cleanup(func() { store.Close() })
			return func(*testing.T) ports.ObjectStorage { return store }
		}), contracttests.ObjectStorageCapabilities{ConditionalPut: true, PathLikeKeys: true, NestedKeys: true, Linearizable: true})
	})
}
