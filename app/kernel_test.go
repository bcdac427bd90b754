package app

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/adapters/secondary/objectstorage/memory"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/tcpproxy"
	"github.com/abi-engine/engine/ports"
)

// putWatch is an object store whose Puts say when they start, and when
// they have returned with their context ended.
type putWatch struct {
	ports.ObjectStorage
	started, ended chan struct{}
}

func (w putWatch) Put(ctx context.Context, key string, r io.Reader, opts ports.PutObjectOptions) (ports.ObjectInfo, error) {
	close(w.started)
	info, err := w.ObjectStorage.Put(ctx, key, r, opts)
	if ctx.Err() != nil {
		close(w.ended)
	}
	return info, err
}

// stalled yields one chunk's worth, then nothing until let closes.
type stalled struct {
	given bool
	let   chan struct{}
}

func (r *stalled) Read(p []byte) (int, error) {
	if !r.given {
		r.given = true
		return copy(p, strings.Repeat("x", 1000)), nil
	}
	<-r.let
	return 0, io.EOF
}

// A fence usually comes because the engine cannot reach its broker, and
// object stores are not fenced: an upload's Put that went on writing after
// the fence could land beside a successor's. So a fence cancels what runs
// and closes every session before anything waits on the broker. Before,
// the transfers closed only after the accepting connection's drain and a
// flush had both timed out, 12 s after the fence began.
func TestAFenceEndsTheTransfersBeforeItWaitsOnAnUnreachableBroker(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	proxy := tcpproxy.Start(t, strings.TrimPrefix(url, "nats://"))
	viaProxy := func() (*nats.Conn, error) { return nats.Connect("nats://"+proxy.Addr(), nats.MaxReconnects(-1)) }
	session, err := viaProxy()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(session.Close)
	memStore, err := memory.Open(t.Context(), memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	store := putWatch{ObjectStorage: memStore, started: make(chan struct{}), ended: make(chan struct{})}
	k, err := newKernel(natsapi.Options{
		Owner:   domain.NewInstanceID(),
		Connect: viaProxy,
		Replies: session,
		Admit:   func() (uint64, bool) { return 1, true },
	}, func(tr *natsapi.TransferHost) []natsapi.Service {
		return []natsapi.Service{natsapi.ObjectStorage(store, tr)}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.stop)
	t.Cleanup(proxy.Unblock) // before the kernel's stop, which drains through it
	source := &stalled{let: make(chan struct{})}
	defer close(source.let)
	objects := natsclient.NewObjectStorage(natsclient.New(natstest.Connect(t, url)))
	go func() { _, _ = objects.Put(context.Background(), "k", source, ports.PutObjectOptions{}) }()
	select {
	case <-store.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the upload never reached the store")
	}

	proxy.Block()
	fenced := make(chan func(), 1)
	go func() { fenced <- k.fence() }()
	var wait func()
	select {
	case wait = <-fenced:
	case <-time.After(5 * time.Second):
		t.Fatal("the fence waited on the unreachable broker before it ended the transfers")
	}
	select { // the broker is still out of reach
	case <-store.ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the fence left the upload's Put running, or it returned with its context alive")
	}
	if open := k.transfers.Open(); open != 0 {
		t.Fatalf("%d transfers open after the fence", open)
	}
	proxy.Unblock()
	wait()
}
