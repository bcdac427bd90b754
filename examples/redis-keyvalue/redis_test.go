package rediskv_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	cachekv "github.com/abi-engine/engine/adapters/secondary/cache/keyvalue"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/contracttests/backendtest"
	"github.com/abi-engine/engine/ports"

	rediskv "github.com/abi-engine/engine/examples/redis-keyvalue"
)

// addrVar names the Redis server the tests use; internal/testservices/services.sh
// starts one and exports it.
const addrVar = "ENGINE_TEST_REDIS_ADDR"

// newStore gives a test a fresh store: every handle it opens shares one
// key prefix of the test's own, which is deleted when the test ends.
func newStore(t *testing.T) func(t *testing.T) *rediskv.Store {
	addr := backendtest.Lookup(t, addrVar, "Redis", false)
	prefix := backendtest.Namespace(t, "kv", func(ctx context.Context, ns string) error {
		return deleteUnder(ctx, addr, ns)
	}) + ":"
	return func(t *testing.T) *rediskv.Store {
		s, err := rediskv.Open(t.Context(), rediskv.Config{Addr: addr, Prefix: prefix})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
}

// deleteUnder deletes every key that starts with ns.
func deleteUnder(ctx context.Context, addr, ns string) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	iter := rdb.Scan(ctx, 0, ns+"*", 1000).Iterator()
	for iter.Next(ctx) {
		if err := rdb.Del(ctx, iter.Val()).Err(); err != nil {
			return err
		}
	}
	return iter.Err()
}

func TestKeyValueContract(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		contracttests.RunKeyValue(t, contracttests.HarnessFunc[ports.KeyValue](func(t *testing.T) func(*testing.T) ports.KeyValue {
			open := newStore(t)
			return func(t *testing.T) ports.KeyValue { return open(t) }
		}), contracttests.KeyValueCapabilities{Durable: true, Fenced: true})
	})
}

// The engine's cache tier over the keyvalue service runs on this adapter
// when services.cache is {adapter: keyvalue}: it must hold the cache
// contract too.
func TestCacheContractOverRedis(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		contracttests.RunCache(t, contracttests.HarnessFunc[ports.Cache](func(t *testing.T) func(*testing.T) ports.Cache {
			open := newStore(t)
			return func(t *testing.T) ports.Cache {
				c, err := cachekv.Open(t.Context(), cachekv.Config{}, open(t))
				if err != nil {
					t.Fatalf("open the cache tier: %v", err)
				}
				t.Cleanup(func() { _ = c.Close() })
				return c
			}
		}))
	})
}

func TestOpenRefusesABadConfig(t *testing.T) {
	for _, c := range []rediskv.Config{{}, {Addr: "127.0.0.1:1", DB: -1}} {
		if _, err := rediskv.Open(t.Context(), c); err == nil {
			t.Errorf("Open(%+v) accepted", c)
		}
	}
	if _, err := rediskv.Open(t.Context(), rediskv.Config{Addr: "127.0.0.1:1"}); err == nil {
		t.Errorf("Open of a closed port succeeded")
	}
}

// An expired key leaves the index at the engine's sweep, not only when a
// ListKeys walks past it: keys written with a TTL and never listed (every
// cache entry over this adapter) would otherwise grow the index for good.
func TestTheSweepUnlistsExpiredKeys(t *testing.T) {
	addr := backendtest.Lookup(t, addrVar, "Redis", false)
	prefix := backendtest.Namespace(t, "sweep", func(ctx context.Context, ns string) error {
		return deleteUnder(ctx, addr, ns)
	}) + ":"
	s, err := rediskv.Open(t.Context(), rediskv.Config{Addr: addr, Prefix: prefix})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	const expiring = 2500 // more than one batch of the sweep
	for i := range expiring {
		if err := s.Set(t.Context(), fmt.Sprintf("session/%04d", i), []byte("v"), ports.MinTTL); err != nil {
			t.Fatalf("Set: %v", err)
		}
	}
	if err := s.Set(t.Context(), "session/kept", []byte("v"), time.Hour); err != nil {
		t.Fatalf("Set: %v", err)
	}
	// The last key written expires last.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ok, err := s.Exists(t.Context(), fmt.Sprintf("session/%04d", expiring-1))
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the last key never expired")
		}
	}
	sweeper, ok := any(s).(ports.Expirer)
	if !ok {
		t.Fatalf("the store is no ports.Expirer: the engine never sweeps its index")
	}
	if n, err := sweeper.DeleteExpired(t.Context()); err != nil || n != expiring {
		t.Fatalf("DeleteExpired = %d, %v; want %d", n, err, expiring)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	if members, err := rdb.ZRange(t.Context(), prefix+"index", 0, -1).Result(); err != nil || len(members) != 1 || members[0] != "session/kept" {
		t.Fatalf("the index after the sweep holds %d members (%.3q), %v; want the live key only", len(members), members, err)
	}
}
