package natsapi_test

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

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
	objs := newObjects(t)
	if _, err := objs.Put(t.Context(), "k", strings.NewReader("the bytes"), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	store := &deafReads{ObjectStorage: objs, gate: make(chan struct{}), reading: make(chan struct{})}
	e := newEngine(t, url, store, engineOptions{})
	gate := sync.OnceFunc(func() { close(store.gate) })
	t.Cleanup(gate)
	nc := natstest.Connect(t, url)
	opened, err := openTransfer(t, nc, wire.TransferOpen{Mode: wire.TransferGet, Key: "k"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := sessionCall(nc, transferSubject(opened.ID, wire.SessionRead), opened.Ref(), 0, nil, nil)
		read <- err
	}()
	select {
	case <-store.reading:
	case <-time.After(30 * time.Second):
		t.Fatal("the read did not reach the store in 30 s")
	}
	fenced := make(chan struct{})
	go func() {
		e.transfers.Fence()()
		e.transfers.Stop()
		close(fenced)
	}()
	select {
	case <-fenced:
	case <-time.After(30 * time.Second):
		gate()
		<-fenced
		t.Fatal("the fence and the stop of the transfers waited more than 30 s for a store that ignored the cancel")
	}
	gate()
	waitFor(t, func() bool { return e.transfers.Open() == 0 })
	<-read
}
