package natsclient_test

import (
	"testing"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/cache/memory"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

// The facade passes the same contract as a local cache: facade, broker,
// endpoint, memory adapter.
func TestCacheContract(t *testing.T) {
	t.Run("nats", func(t *testing.T) {
		contracttests.RunCache(t, contracttests.HarnessFunc[ports.Cache](func(t *testing.T) func(*testing.T) ports.Cache {
			store, err := memory.Open(t.Context(), memory.Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = store.Close() })
			client := serve(t, natsapi.Cache(store))
			return func(t *testing.T) ports.Cache { return natsclient.NewCache(client(t)) }
		}))
	})
}
