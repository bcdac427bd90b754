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
		}), contracttests.KeyValueCapabilities{Durable: true, Fenced: true})
	})
}

// TestKeyValueContractUnderATerm runs the contract again with every call
// under one term's fencing token, so every case, the races of two handles
// on one bucket included, goes through the fenced writes.
func TestKeyValueContractUnderATerm(t *testing.T) {
	jstest.Run(t, func(t *testing.T, url string, replicas int) {
		contracttests.RunKeyValue(t, contracttests.HarnessFunc[ports.KeyValue](func(t *testing.T) func(*testing.T) ports.KeyValue {
			c := jetstream.Config{Bucket: jstest.Bucket(t), Replicas: replicas}
			return func(t *testing.T) ports.KeyValue { return underTerm{open(t, url, c)} }
		}), contracttests.KeyValueCapabilities{Durable: true}) // the handles share one term, so the fencing case cannot run on them
	})
}

// underTerm is a store whose every call carries the fencing token 11.
// (contracttests.UnderTerm needs a store with a sweep of expired values;
// the broker removes them here.)
type underTerm struct{ s *jetstream.Store }

func term(ctx context.Context) context.Context { return ports.WithFencingToken(ctx, 11) }

func (u underTerm) Get(ctx context.Context, key string) ([]byte, error) {
	return u.s.Get(term(ctx), key)
}

func (u underTerm) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	return u.s.Set(term(ctx), key, value, ttl)
}

func (u underTerm) SetIfAbsent(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error) {
	return u.s.SetIfAbsent(term(ctx), key, value, ttl)
}

func (u underTerm) Delete(ctx context.Context, key string) (bool, error) {
	return u.s.Delete(term(ctx), key)
}

func (u underTerm) DeleteIfValue(ctx context.Context, key string, value []byte) (bool, error) {
	return u.s.DeleteIfValue(term(ctx), key, value)
}

func (u underTerm) Exists(ctx context.Context, key string) (bool, error) {
	return u.s.Exists(term(ctx), key)
}

func (u underTerm) Close() error { return u.s.Close() }

func (u underTerm) ListKeys(ctx context.Context, prefix string, limit int, cursor string) ([]string, string, error) {
	return u.s.ListKeys(term(ctx), prefix, limit, cursor)
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
