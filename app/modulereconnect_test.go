package app_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/tcpproxy"
	"github.com/abi-engine/engine/internal/wire"
)

// A module's call sent while its engine's connection reconnects fails, and
// never lands later. The modules' facades shared the engine's session
// connection, which keeps nats.go's reconnect buffer: a call made while
// the broker was out of reach was held there and sent once the connection
// came back, after the module had seen it fail and after the key was
// written again, and it overwrote that later write.
func TestAModulesWriteGivenUpWhileItsConnectionReconnectsNeverLandsLater(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	url := natstest.StartServer(t).ClientURL()
	served, a := start(t, testConfig(t, url, "serve", "", memoryServices))
	defer a.RequireStop()
	// The module's engine reaches the broker through a proxy; a client,
	// so that the engine that runs the calls stays connected throughout.
	proxy := tcpproxy.Start(t, strings.TrimPrefix(url, "nats://"))
	e, b := start(t, testConfig(t, "nats://"+proxy.Addr(), "client", "", memoryServices))
	defer b.RequireStop()
	kv := e.Services().KeyValue
	if err := kv.Set(ctx, "k", []byte("before"), 0); err != nil {
		t.Fatalf("a module's set before: %v", err)
	}

	proxy.Down()
	// The connection notices the broker is gone when it next reads; a
	// call sent before that is on its way already, as on any connection.
	// Once a call of another key is refused as unavailable, the
	// connection is known to be away.
	away := time.Now().Add(30 * time.Second)
	for {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		err := kv.Set(cctx, "while-away", []byte("x"), 0)
		ccancel()
		if errors.Is(err, wire.ErrUnavailable) {
			break
		}
		if time.Now().After(away) {
			t.Fatalf("no module call was refused 503 in 30 s while its engine could not reach the broker (last: %v)", err)
		}
	}
	cctx, ccancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err := kv.Set(cctx, "k", []byte("stale"), 0)
	ccancel()
	if err == nil {
		t.Fatal("a module's set succeeded while its engine could not reach the broker")
	}
	if err := served.Services().KeyValue.Set(ctx, "k", []byte("new"), 0); err != nil {
		t.Fatal(err)
	}

	// The connection comes back. A call after the reconnect is answered
	// once whatever the connection sent before it has been: one
	// connection's messages keep their order.
	proxy.Up()
	for {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		err := kv.Set(cctx, "probe", []byte("after"), 0)
		ccancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no module call went through after the reconnect: %v", err)
		}
	}
	got, err := served.Services().KeyValue.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "new" {
		t.Fatalf("the key holds %q after the module's connection came back, want %q: the set given up while it reconnected landed later", got, "new")
	}
}
