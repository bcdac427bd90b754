package jetstream_test

import (
	"context"
	"testing"
	"time"

	cachekv "github.com/abi-engine/engine/adapters/secondary/cache/keyvalue"
	"github.com/abi-engine/engine/adapters/secondary/internal/jstest"
	"github.com/abi-engine/engine/adapters/secondary/keyvalue/jetstream"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// open opens a store on a connection of its own, closed when the test ends.
func open(t *testing.T, url string, c jetstream.Config) *jetstream.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := jetstream.Open(ctx, c, natstest.Connect(t, url))
	if err != nil {
		t.Fatalf("Open bucket %s: %v", c.Bucket, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestKeyValueContract(t *testing.T) {
	jstest.Run(t, func(t *testing.T, url string, replicas int) {
		contracttests.RunKeyValue(t, contracttests.HarnessFunc[ports.KeyValue](func(t *testing.T) func(*testing.T) ports.KeyValue {
			c := jetstream.Config{Bucket: jstest.Bucket(t), Replicas: replicas}
			return func(t *testing.T) ports.KeyValue { return open(t, url, c) }
		}), contracttests.KeyValueCapabilities{Durable: true})
	})
}

func TestCacheContract(t *testing.T) {
	jstest.Run(t, func(t *testing.T, url string, replicas int) {
		contracttests.RunCache(t, contracttests.HarnessFunc[ports.Cache](func(t *testing.T) func(*testing.T) ports.Cache {
			c := jetstream.Config{Bucket: jstest.Bucket(t), Replicas: replicas}
			// Each handle is a tier of its own over a store of its own on
			// the one bucket, as two engines would be.
			return func(t *testing.T) ports.Cache {
				tier, err := cachekv.Open(t.Context(), cachekv.Config{}, open(t, url, c))
				if err != nil {
					t.Fatalf("open the cache tier: %v", err)
				}
				t.Cleanup(func() { _ = tier.Close() })
				return tier
			}
		}))
	})
}
