package jetstream_test

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/secondary/document/jetstream"
	"github.com/abi-engine/engine/adapters/secondary/internal/jstest"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// purgeHolder dials connections that hold their first stream purge request
// until released: a store paused between a drop's marker removal and its
// purge.
type purgeHolder struct {
	once    sync.Once
	held    chan struct{}
	release chan struct{}
}

func (h *purgeHolder) Dial(network, address string) (net.Conn, error) {
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return holdingConn{Conn: c, h: h}, nil
}

type holdingConn struct {
	net.Conn
	h *purgeHolder
}

func (c holdingConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte("$JS.API.STREAM.PURGE.")) {
		c.h.once.Do(func() {
			close(c.h.held)
			<-c.h.release
		})
	}
	return c.Conn.Write(b)
}

// A drop whose purge lands after the collection was made again, by this
// engine or by its successor, removes only the generation it dropped: the
// documents written to the new collection, acknowledged, stay.
func TestALateDropsPurgeLeavesTheCollectionMadeAgain(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	c := jetstream.Config{Bucket: jstest.Bucket(t), Replicas: 1}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	h := &purgeHolder{held: make(chan struct{}), release: make(chan struct{})}
	nc, err := nats.Connect(url, nats.SetCustomDialer(h))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	dropper, err := jetstream.Open(ctx, c, nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dropper.Close() })
	other := open(t, url, c)

	if err := other.EnsureCollection(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Put(ctx, "c", "old", map[string]any{"n": 1}, ports.Cond{}); err != nil {
		t.Fatal(err)
	}
	dropped := make(chan error, 1)
	go func() { dropped <- dropper.DropCollection(ctx, "c") }()
	select {
	case <-h.held: // the marker is gone; the purge has not reached the server
	case <-ctx.Done():
		t.Fatal("the drop never sent its purge")
	}

	if err := other.EnsureCollection(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Put(ctx, "c", "new", map[string]any{"n": 2}, ports.Cond{}); err != nil {
		t.Fatal(err)
	}
	close(h.release)
	if err := <-dropped; err != nil {
		t.Fatalf("DropCollection: %v", err)
	}
	if _, err := other.Get(ctx, "c", "new"); err != nil {
		t.Fatalf("the document written to the collection made again is gone after the late purge: %v", err)
	}
	if _, err := other.Get(ctx, "c", "old"); err == nil {
		t.Fatal("the dropped generation's document shows in the collection made again")
	}
}
