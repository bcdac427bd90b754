package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/storage"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/tcpproxy"
	"github.com/abi-engine/engine/ports"
)

// openKeyValueOnNATS opens the keyvalue store on JetStream as an engine
// does, through the engine's own dialer for its stores' connections.
func openKeyValueOnNATS(t *testing.T, ctx context.Context, url string) ports.KeyValue {
	t.Helper()
	cfg := jetstreamKeyValueConfig(t, url, false)
	built, err := BuildStorage(cfg)
	if err != nil {
		t.Fatal(err)
	}
	opened, err := storage.Open(ctx, built)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = storage.Close(opened) })
	for _, o := range opened {
		if o.Service == ports.ServiceKeyValue {
			return o.Port.(ports.KeyValue)
		}
	}
	t.Fatal("no keyvalue store opened")
	return nil
}

// A store that keeps its data on NATS is not fenced: only the engine's
// fence, which cancels the calls running, keeps a write of an engine that
// lost its lease from landing beside its successor's. A write sent while
// the store's connection is reconnecting must therefore fail, not wait in
// the client's reconnect buffer: that buffer is sent when the connection
// comes back, whenever that is, long after the call that sent it gave up
// (the fence cancelled it) and after a successor took over and wrote the
// key. Before, the engine's store connections kept nats.go's default
// reconnect buffer of 8 MB, and the old engine's write overwrote the
// successor's once its connection came back.
func TestAStoreWriteGivenUpWhileItsConnectionReconnectsNeverLandsLater(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	url := natstest.StartServer(t).ClientURL()
	proxy := tcpproxy.Start(t, strings.TrimPrefix(url, "nats://"))
	old := openKeyValueOnNATS(t, ctx, "nats://"+proxy.Addr())
	successor := openKeyValueOnNATS(t, ctx, url)
	if err := old.Set(ctx, "k", []byte("before"), 0); err != nil {
		t.Fatal(err)
	}

	// The old engine's broker goes away for a moment, as at its restart:
	// its connection's reconnects are refused, and it waits between them.
	accepted := proxy.Accepted()
	proxy.Down()
	if !proxy.AwaitAccepted(accepted, ctx.Done()) {
		t.Fatal("the store's connection never tried to reconnect")
	}
	// A call writes meanwhile and is given up, as the fence cancels it.
	wctx, wcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err := old.Set(wctx, "k", []byte("stale"), 0)
	wcancel()
	if err == nil {
		t.Fatal("a write answered while its connection could not reach the broker")
	}
	// The successor serves and writes the key.
	if err := successor.Set(ctx, "k", []byte("new"), 0); err != nil {
		t.Fatal(err)
	}

	// The old engine's connection comes back. A write of its own after the
	// reconnect is answered once whatever it sent before has reached the
	// stream, which orders the messages of one connection.
	proxy.Up()
	if err := old.Set(ctx, "probe", []byte("after"), 0); err != nil {
		t.Fatalf("a write after the reconnect: %v", err)
	}
	got, err := successor.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "new" {
		t.Fatalf("the key holds %q after the old engine reconnected, want the successor's %q: the write given up while reconnecting landed later", got, "new")
	}
}
