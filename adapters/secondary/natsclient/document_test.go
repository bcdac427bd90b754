package natsclient_test

import (
	"testing"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/document/memory"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

// The facade passes the same contract as a local store: facade, broker,
// endpoint, memory adapter.
func TestDocumentContract(t *testing.T) {
	t.Run("nats", func(t *testing.T) {
		contracttests.RunDocument(t, contracttests.HarnessFunc[ports.DocumentStore](func(t *testing.T) func(*testing.T) ports.DocumentStore {
			store, err := memory.Open(t.Context(), memory.Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = store.Close() })
			client := serve(t, natsapi.Document(store))
			return func(t *testing.T) ports.DocumentStore { return natsclient.NewDocument(client(t)) }
		}), contracttests.DocumentCapabilities{})
	})
}
