package rediskv_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
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

// lossyProxy forwards connections to a Redis server. Armed, it passes the
// next command holding EVALSHA (a write script) to the server, drops the
// server's reply and closes the client's connection: the network failing
// after the server ran a write and before its reply came back.
type lossyProxy struct {
	ln      net.Listener
	target  string
	armed   atomic.Bool
	dropped chan struct{}
}

func newLossyProxy(t *testing.T, target string) *lossyProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	p := &lossyProxy{ln: ln, target: target, dropped: make(chan struct{}, 1)}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(client)
		}
	}()
	return p
}

func (p *lossyProxy) serve(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	var swallow atomic.Bool
	closeBoth := func() { _ = client.Close(); _ = server.Close() }
	go func() {
		defer closeBoth()
		buf := make([]byte, 64<<10)
		for {
			n, err := client.Read(buf)
			if err != nil {
				return
			}
			if bytes.Contains(bytes.ToLower(buf[:n]), []byte("evalsha")) && p.armed.CompareAndSwap(true, false) {
				swallow.Store(true)
			}
			if _, err := server.Write(buf[:n]); err != nil {
				return
			}
		}
	}()
	defer closeBoth()
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if err != nil {
			return
		}
		if swallow.Load() {
			p.dropped <- struct{}{}
			return
		}
		if _, err := client.Write(buf[:n]); err != nil {
			return
		}
	}
}

// A conditional write whose reply is lost has landed or not, and its
// caller cannot tell which: it must get an error that does not call it not
// done (ports.ErrNotDone), and not the answer of the
// same write sent again, which would find its own value and answer that
// the key was taken (a lock its caller holds, and thinks it does not), or
// that there was nothing to delete.
func TestAWriteWhoseReplyIsLostFailsRatherThanRunTwice(t *testing.T) {
	addr := backendtest.Lookup(t, addrVar, "Redis", false)
	prefix := backendtest.Namespace(t, "lost", func(ctx context.Context, ns string) error {
		return deleteUnder(ctx, addr, ns)
	}) + ":"
	proxy := newLossyProxy(t, addr)
	s, err := rediskv.Open(t.Context(), rediskv.Config{Addr: proxy.ln.Addr().String(), Prefix: prefix})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	// The first run of each script loads it (EVALSHA, then EVAL), so the
	// armed proxy meets a write that runs.
	if _, err := s.Delete(t.Context(), "warm"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := s.Set(t.Context(), "held", []byte("v"), 0); err != nil {
		t.Fatalf("Set: %v", err)
	}
	lose := func(write string, do func() (bool, error)) (bool, error) {
		t.Helper()
		proxy.armed.Store(true)
		ok, err := do()
		select {
		case <-proxy.dropped:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the proxy never dropped its reply", write)
		}
		return ok, err
	}

	won, err := lose("SetIfAbsent", func() (bool, error) { return s.SetIfAbsent(t.Context(), "lock", []byte("mine"), 0) })
	if v, gerr := rdb.Get(t.Context(), prefix+"v:lock").Result(); gerr != nil || v != "mine" {
		t.Fatalf("the lost SetIfAbsent did not land: %q, %v", v, gerr)
	}
	if err == nil && !won {
		t.Errorf("SetIfAbsent whose reply was lost = false, nil: it ran again and found its own value; the caller holds the key and is told it does not")
	}
	if errors.Is(err, ports.ErrNotDone) {
		t.Errorf("SetIfAbsent whose reply was lost: %v; it landed, and is never not done", err)
	}

	deleted, err := lose("DeleteIfValue", func() (bool, error) { return s.DeleteIfValue(t.Context(), "held", []byte("v")) })
	if n, gerr := rdb.Exists(t.Context(), prefix+"v:held").Result(); gerr != nil || n != 0 {
		t.Fatalf("the lost DeleteIfValue did not land: %d, %v", n, gerr)
	}
	if err == nil && !deleted {
		t.Errorf("DeleteIfValue whose reply was lost = false, nil: it ran again and found nothing; the caller is told the key did not hold its value")
	}
	if errors.Is(err, ports.ErrNotDone) {
		t.Errorf("DeleteIfValue whose reply was lost: %v; it landed, and is never not done", err)
	}
}
