package natsclient_test

import (
	"testing"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/adapters/secondary/vectorstore/memory"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

// The facade passes the same contract as a local store: facade, broker,
// endpoint, memory adapter.
func TestVectorStoreContract(t *testing.T) {
	t.Run("nats", func(t *testing.T) {
		contracttests.RunVectorStore(t, contracttests.HarnessFunc[ports.VectorStore](func(t *testing.T) func(*testing.T) ports.VectorStore {
			store, err := memory.Open(t.Context(), memory.Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = store.Close() })
			client := serve(t, natsapi.VectorStore(store))
			return func(t *testing.T) ports.VectorStore { return natsclient.NewVectorStore(client(t)) }
		}), contracttests.VectorStoreCapabilities{})
	})
}
