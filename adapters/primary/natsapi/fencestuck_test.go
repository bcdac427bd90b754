package natsapi_test

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// deafReads is an object store whose readers wait for gate before they
// read, whatever happens to the context of the Get that made them: a
// store that does not heed a cancel.
type deafReads struct {
	ports.ObjectStorage
	gate    chan struct{}
	reading chan struct{} // closed when a reader first waits
	once    sync.Once
}

func (d *deafReads) Get(ctx context.Context, key string, o ports.GetObjectOptions) (io.ReadCloser, ports.ObjectInfo, error) {
	r, info, err := d.ObjectStorage.Get(ctx, key, o)
	if err != nil {
		return nil, info, err
	}
	return &deafReader{ReadCloser: r, d: d}, info, nil
}

type deafReader struct {
	io.ReadCloser
	d *deafReads
}

func (r *deafReader) Read(p []byte) (int, error) {
	r.d.once.Do(func() { close(r.d.reading) })
	<-r.d.gate
	return r.ReadCloser.Read(p)
}

// A fence, and a stop, of the transfer host return while a download's
// read waits in a store that does not heed the cancel: the transfer is
// closed once the store lets go. Before, the fence waited for the store
// to return, for good if it never did, and with it the engine's serving
// loop, which fences on a lost lease, and its stop, which stops the
// transfers before it releases the lease.
func TestAFenceOfTheTransfersWaitsForNoStoreThatIgnoresTheCancel(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	e, stuck := startStuckDownload(t, url)
	fenced := make(chan struct{})
	go func() {
		e.transfers.Fence()()
		e.transfers.Stop()
		close(fenced)
	}()
	select {
	case <-fenced:
	case <-time.After(30 * time.Second):
		stuck.gate()
		<-fenced
		t.Fatal("the fence and the stop of the transfers waited more than 30 s for a store that ignored the cancel")
	}
	stuck.gate()
	waitFor(t, func() bool { return e.transfers.Open() == 0 })
	<-stuck.read
}

// stuckDownload is a download whose read waits in a store that does not
// heed the cancel, until gate is called; read has the read's outcome.
type stuckDownload struct {
	nc     *nats.Conn
	opened wire.SessionOpened
	gate   func()
	read   chan error
}

// startStuckDownload serves a store that does not heed the cancel at url,
// opens a download of one of its objects, and returns once the download's
// first read waits in the store.
func startStuckDownload(t *testing.T, url string) (*engine, *stuckDownload) {
	t.Helper()
	objs := newObjects(t)
	if _, err := objs.Put(t.Context(), "k", strings.NewReader("the bytes"), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	store := &deafReads{ObjectStorage: objs, gate: make(chan struct{}), reading: make(chan struct{})}
	e := newEngine(t, url, store, engineOptions{})
	d := &stuckDownload{nc: natstest.Connect(t, url), gate: sync.OnceFunc(func() { close(store.gate) }), read: make(chan error, 1)}
	t.Cleanup(d.gate)
	var err error
	if d.opened, err = openTransfer(t, d.nc, wire.TransferOpen{Mode: wire.TransferGet, Key: "k"}, nil); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := sessionCall(d.nc, transferSubject(d.opened.ID, wire.SessionRead), d.opened.Ref(), 0, nil, nil)
		d.read <- err
	}()
	select {
	case <-store.reading:
	case <-time.After(30 * time.Second):
		t.Fatal("the read did not reach the store in 30 s")
	}
	return e, d
}
