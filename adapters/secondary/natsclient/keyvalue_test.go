package natsclient_test

import (
	"testing"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

// The facade passes the same contract as a local store: facade, broker,
// endpoint, memory adapter.
func TestKeyValueContract(t *testing.T) {
	t.Run("nats", func(t *testing.T) {
		contracttests.RunKeyValue(t, contracttests.HarnessFunc[ports.KeyValue](func(t *testing.T) func(*testing.T) ports.KeyValue {
			store, err := memory.Open(t.Context(), memory.Config{})
			if err != nil {
				t.Fatal(err)
			}
			client := serve(t, natsapi.KeyValue(store))
			return func(t *testing.T) ports.KeyValue { return natsclient.NewKeyValue(client(t)) }
		}), contracttests.KeyValueCapabilities{})
	})
}
