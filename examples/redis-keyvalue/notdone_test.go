package rediskv_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/abi-engine/engine/contracttests/backendtest"
	"github.com/abi-engine/engine/ports"

	rediskv "github.com/abi-engine/engine/examples/redis-keyvalue"
)

// openTuned opens a store on a key prefix of the test's own at addr, with
// tune run on the client's options, and a client of its own on the server
// at server to look at what landed.
func openTuned(t *testing.T, server, addr string, tune func(*redis.Options)) (*rediskv.Store, *redis.Client, string) {
	t.Helper()
	prefix := backendtest.Namespace(t, "notdone", func(ctx context.Context, ns string) error {
		return deleteUnder(ctx, server, ns)
	}) + ":"
	s, err := rediskv.OpenTuned(t.Context(), rediskv.Config{Addr: addr, Prefix: prefix}, tune)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: server})
	t.Cleanup(func() { _ = rdb.Close() })
	return s, rdb, prefix
}

// A write the client could not send, because no connection to the server
// could be dialled (here refused: the address the store dials stopped
// listening), never reached Redis: it is not done (ports.ErrNotDone), which
// the API answers 503 with Retry-After. Before, it was a 500, as a write
// that may have landed.
func TestAWriteThatCouldNotDialIsNotDone(t *testing.T) {
	addr := backendtest.Lookup(t, addrVar, "Redis", false)
	proxy := newLossyProxy(t, addr)
	// Every connection counts as stale once used, so each command dials.
	s, rdb, prefix := openTuned(t, addr, proxy.ln.Addr().String(), func(o *redis.Options) {
		o.ConnMaxIdleTime = time.Nanosecond
		o.DialerRetries = 1
	})
	if err := proxy.ln.Close(); err != nil {
		t.Fatal(err)
	}
	err := s.Set(t.Context(), "k", []byte("v"), 0)
	if !errors.Is(err, ports.ErrNotDone) {
		t.Fatalf("a set whose connection was refused: %v, want ports.ErrNotDone", err)
	}
	if n, err := rdb.Exists(t.Context(), prefix+"v:k").Result(); err != nil || n != 0 {
		t.Fatalf("the set that was not done is in Redis: %d, %v", n, err)
	}
}

// A write that waited for a connection of the pool, each held by another
// call, past the pool's timeout was never sent: it is not done
// (ports.ErrNotDone). Before, it was a 500, as a write that may have
// landed.
func TestAWriteThatFoundNoFreeConnectionIsNotDone(t *testing.T) {
	addr := backendtest.Lookup(t, addrVar, "Redis", false)
	s, rdb, prefix := openTuned(t, addr, addr, func(o *redis.Options) {
		o.PoolSize = 1
		o.PoolTimeout = 100 * time.Millisecond
	})
	giveBack := s.HoldConnection(t)
	err := s.Set(t.Context(), "k", []byte("v"), 0)
	giveBack()
	if !errors.Is(err, ports.ErrNotDone) {
		t.Fatalf("a set that found no free connection: %v, want ports.ErrNotDone", err)
	}
	if n, err := rdb.Exists(t.Context(), prefix+"v:k").Result(); err != nil || n != 0 {
		t.Fatalf("the set that was not done is in Redis: %d, %v", n, err)
	}
	if err := s.Set(t.Context(), "k", []byte("v"), 0); err != nil {
		t.Fatalf("the set once the connection was free: %v", err)
	}
}
