package tcpproxy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/tcpproxy"
)

// patience bounds every wait on something that must happen, so a loaded
// machine does not fail the tests.
const patience = time.Minute

func TestBlockNamedStallsTheConnectionsOfThatNameOnlyUntilUnblocked(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	p := tcpproxy.Start(t, strings.TrimPrefix(url, "nats://"))
	via := "nats://" + p.Addr()
	watcher := natstest.Connect(t, url)
	sub, err := watcher.SubscribeSync("x.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}
	held := natstest.Connect(t, via, nats.Name("held"))
	other := natstest.Connect(t, via, nats.Name("other"))

	p.BlockNamed("held")
	if err := held.Publish("x.held", nil); err != nil {
		t.Fatal(err)
	}
	flushed := make(chan error, 1)
	go func() { flushed <- held.FlushTimeout(patience) }()
	// A connection that names itself so after the block is held from its
	// CONNECT on: it connects once the block ends.
	connected := make(chan error, 1)
	go func() {
		nc, err := nats.Connect(via, nats.Name("held"), nats.Timeout(patience))
		if err == nil {
			t.Cleanup(nc.Close)
		}
		connected <- err
	}()

	if err := other.Publish("x.other", nil); err != nil {
		t.Fatal(err)
	}
	if err := other.FlushTimeout(patience); err != nil {
		t.Fatalf("a connection of another name stalled too: %v", err)
	}
	msg, err := sub.NextMsg(patience)
	if err != nil {
		t.Fatalf("the other connection's message: %v", err)
	}
	if msg.Subject != "x.other" {
		t.Fatalf("got %s first: the stalled connection's publish went through", msg.Subject)
	}
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := sub.Pending(); n != 0 {
		t.Fatalf("%d more messages while the block held: the stalled connection's publish went through", n)
	}
	select {
	case err := <-flushed:
		t.Fatalf("the stalled connection's flush ended while the block held: %v", err)
	case err := <-connected:
		t.Fatalf("a connection named as the block connected while it held: %v", err)
	default:
	}

	p.UnblockNamed("held")
	if err := <-flushed; err != nil {
		t.Fatalf("flush once unblocked: %v", err)
	}
	if err := <-connected; err != nil {
		t.Fatalf("connect once unblocked: %v", err)
	}
	msg, err = sub.NextMsg(patience)
	if err != nil {
		t.Fatalf("the stalled connection's message once unblocked: %v", err)
	}
	if msg.Subject != "x.held" {
		t.Fatalf("got %s, want x.held", msg.Subject)
	}
}

func TestCloseEndsTheConnectionsABlockNamedHolds(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	p := tcpproxy.Start(t, strings.TrimPrefix(url, "nats://"))
	held := natstest.Connect(t, "nats://"+p.Addr(), nats.Name("held"), nats.NoReconnect())
	p.BlockNamed("held")
	flushed := make(chan error, 1)
	go func() { flushed <- held.FlushTimeout(patience) }()

	closed := make(chan struct{})
	go func() {
		p.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(patience):
		t.Fatal("Close waited on a connection BlockNamed held")
	}
	if err := <-flushed; err == nil {
		t.Fatal("a flush held by the block succeeded, though Close dropped its connection")
	}
}
