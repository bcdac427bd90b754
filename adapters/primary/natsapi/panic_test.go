package natsapi_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// askFor sends data to the echo subject and returns the answer or the
// error it carries.
func askFor(nc *nats.Conn, data string) (string, error) {
	reply, err := nc.Request(sayer, []byte(data), 10*time.Second)
	if err != nil {
		return "", err
	}
	if err := wire.ErrorFromHeaders(reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader)); err != nil {
		return "", err
	}
	return string(reply.Data), nil
}

// A call whose work panics, in an adapter or an endpoint, ordinary or
// quick, is answered 500 and the engine serves on: left to unwind, the
// panic ended the process at once while it held the lease, with no release
// and no drain, and no engine served until the lease ran out.
func TestACallWhoseWorkPanicsIsAnswered500AndTheEngineServesOn(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	fragile := natsapi.Service{Name: "echo", Endpoints: []natsapi.Endpoint{{Name: "say",
		Handler: func(_ context.Context, call *natsapi.Call) ([]byte, error) {
			if string(call.Data) == "boom" {
				var m map[string]int
				m["boom"]++ // a nil map: the kind of panic an adapter makes
			}
			return call.Data, nil
		},
		Quick: func(_ context.Context, call *natsapi.Call) ([]byte, bool, error) {
			if string(call.Data) == "quick boom" {
				panic("quick boom")
			}
			return nil, false, nil
		}}}}
	newHost(t, url, natsapi.Options{}, fragile)
	nc := natstest.Connect(t, url)
	for _, data := range []string{"boom", "quick boom"} {
		_, err := askFor(nc, data)
		var re *wire.RemoteError
		if !errors.As(err, &re) || re.Code != wire.CodeInternal {
			t.Fatalf("a call whose work panicked (%s) answered %v, want a 500", data, err)
		}
		if strings.Contains(re.Message, "boom") {
			t.Errorf("the 500 tells the caller the panic's text: %q", re.Message)
		}
		if got, err := askFor(nc, "after "+data); err != nil || got != "after "+data {
			t.Fatalf("a call after the panic (%s) answered %q, %v", data, got, err)
		}
	}
}

// panickyPut is an object store whose Put panics once it has read a byte.
type panickyPut struct{ ports.ObjectStorage }

func (p panickyPut) Put(_ context.Context, _ string, r io.Reader, _ ports.PutObjectOptions) (ports.ObjectInfo, error) {
	var b [1]byte
	_, _ = r.Read(b[:])
	panic("the store lost its way")
}

// An upload whose store panics, on the transfer's own goroutine, fails
// with a 500, and the engine serves the next call.
func TestAnUploadWhoseStorePanicsFailsAndTheEngineServesOn(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	e := &echo{name: "still here"}
	newEngine(t, url, panickyPut{newObjects(t)}, engineOptions{}, e.service())
	nc := natstest.Connect(t, url)
	objects := natsclient.NewObjectStorage(natsclient.New(nc))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err := objects.Put(ctx, "k", strings.NewReader(strings.Repeat("x", 1<<20)), ports.PutObjectOptions{})
	var re *wire.RemoteError
	if !errors.As(err, &re) || re.Code != wire.CodeInternal {
		t.Fatalf("an upload whose store panicked answered %v, want a 500", err)
	}
	if got, err := askFor(nc, ""); err != nil || got != "still here" {
		t.Fatalf("a call after the upload's panic answered %q, %v", got, err)
	}
}

// panickyGet is an object store whose objects' bytes panic as they are read.
type panickyGet struct{ ports.ObjectStorage }

func (p panickyGet) Get(ctx context.Context, key string, opts ports.GetObjectOptions) (io.ReadCloser, ports.ObjectInfo, error) {
	r, info, err := p.ObjectStorage.Get(ctx, key, opts)
	if err != nil {
		return nil, info, err
	}
	return panickyReader{r}, info, nil
}

type panickyReader struct{ io.ReadCloser }

func (panickyReader) Read([]byte) (int, error) { panic("the bytes went missing") }

// A download whose store panics as it reads, in a call of the transfer's
// session, fails with a 500, and the engine serves the next call.
func TestADownloadWhoseStorePanicsFailsAndTheEngineServesOn(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	store := newObjects(t)
	if _, err := store.Put(t.Context(), "k", strings.NewReader("some bytes"), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	e := &echo{name: "still here"}
	newEngine(t, url, panickyGet{store}, engineOptions{}, e.service())
	nc := natstest.Connect(t, url)
	objects := natsclient.NewObjectStorage(natsclient.New(nc))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	r, _, err := objects.Get(ctx, "k", ports.GetObjectOptions{})
	if err == nil {
		_, err = io.ReadAll(r)
		_ = r.Close()
	}
	var re *wire.RemoteError
	if !errors.As(err, &re) || re.Code != wire.CodeInternal {
		t.Fatalf("a download whose store panicked answered %v, want a 500", err)
	}
	if got, err := askFor(nc, ""); err != nil || got != "still here" {
		t.Fatalf("a call after the download's panic answered %q, %v", got, err)
	}
}

// panickyOpen is an object store whose Get panics before it answers.
type panickyOpen struct{ ports.ObjectStorage }

func (panickyOpen) Get(context.Context, string, ports.GetObjectOptions) (io.ReadCloser, ports.ObjectInfo, error) {
	panic("the store lost its way")
}

// A download whose store panics as it opens fails with a 500 and holds no
// transfer: its caller never learned of it, and it held one of the
// caller's transfers and the engine's, and the drain waited on it, until
// its idle time ran out.
func TestADownloadWhoseOpenPanicsHoldsNoTransfer(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	store := newObjects(t)
	e := newEngine(t, url, panickyOpen{store}, engineOptions{transfers: natsapi.TransferOptions{Idle: time.Hour, MaxOpenPerCaller: 1}})
	nc := natstest.Connect(t, url)
	_, err := openTransfer(t, nc, wire.TransferOpen{Mode: wire.TransferGet, Key: "k"}, nil)
	var re *wire.RemoteError
	if !errors.As(err, &re) || re.Code != wire.CodeInternal {
		t.Fatalf("a download whose store panicked as it opened answered %v, want a 500", err)
	}
	if n := e.transfers.Open(); n != 0 {
		t.Fatalf("%d transfers open after the open panicked, want none", n)
	}
	opened, err := openTransfer(t, nc, wire.TransferOpen{Mode: wire.TransferPut, Key: "k"}, nil)
	if err != nil {
		t.Fatalf("the caller's next open, its share one transfer: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := sessionCall(nc, transferSubject(opened.ID, wire.SessionClose), opened.Ref(), -1, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.transfers.Wait(ctx); err != nil {
		t.Fatalf("the drain's wait for the transfers: %v", err)
	}
}

// panicsPartWay is an object store whose objects' bytes panic once, after
// some of them have been read.
type panicsPartWay struct{ ports.ObjectStorage }

func (p panicsPartWay) Get(ctx context.Context, key string, opts ports.GetObjectOptions) (io.ReadCloser, ports.ObjectInfo, error) {
	r, info, err := p.ObjectStorage.Get(ctx, key, opts)
	if err != nil {
		return nil, info, err
	}
	return &panickingAfter{ReadCloser: r, left: 2}, info, nil
}

type panickingAfter struct {
	io.ReadCloser
	left     int
	panicked bool
}

func (p *panickingAfter) Read(b []byte) (int, error) {
	if p.left == 0 && !p.panicked {
		p.panicked = true
		panic("the bytes went missing")
	}
	if p.left > 0 {
		b = b[:min(len(b), p.left)]
	}
	n, err := p.ReadCloser.Read(b)
	p.left -= min(n, max(p.left, 0))
	return n, err
}

// A store that panics part way through a chunk has moved past what it gave
// of it: as for a store's failure, every later read of the download fails,
// and none answers the bytes that follow as if they were the chunk.
func TestADownloadWhoseStorePanicsPartWayFailsEveryLaterRead(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	objs := newObjects(t)
	if _, err := objs.Put(t.Context(), "k", strings.NewReader("aaaabbbbccccdddd"), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	newEngine(t, url, panicsPartWay{objs}, engineOptions{transfers: natsapi.TransferOptions{ChunkSize: 4}})
	nc := natstest.Connect(t, url)
	opened, err := openTransfer(t, nc, wire.TransferOpen{Mode: wire.TransferGet, Key: "k"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, seq := range []int64{0, 0, 1, 2} {
		got, _, err := read(t, nc, opened, seq)
		var re *wire.RemoteError
		if !errors.As(err, &re) || re.Code != wire.CodeInternal {
			t.Fatalf("read %d after the store panicked: %q, %v; want a 500", seq, got, err)
		}
	}
}

// panickyClose is an object store whose objects' readers panic as they
// close.
type panickyClose struct{ ports.ObjectStorage }

func (p panickyClose) Get(ctx context.Context, key string, opts ports.GetObjectOptions) (io.ReadCloser, ports.ObjectInfo, error) {
	r, info, err := p.ObjectStorage.Get(ctx, key, opts)
	if err != nil {
		return nil, info, err
	}
	return panickyCloser{r}, info, nil
}

type panickyCloser struct{ io.ReadCloser }

func (panickyCloser) Close() error { panic("the handle was gone") }

// A download whose store's reader panics as it closes is closed all the
// same, whether its caller closes it or its idle time runs out, and the
// engine serves on. Before, the idle time's close ended the process,
// lease held; and a caller's close left the transfer counted for good,
// holding one of the caller's transfers, and every drain waited out its
// deadline.
func TestADownloadWhoseReaderPanicsAsItClosesIsClosedAllTheSame(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	store := newObjects(t)
	if _, err := store.Put(t.Context(), "k", strings.NewReader("some bytes"), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, url, panickyClose{store}, engineOptions{transfers: natsapi.TransferOptions{Idle: time.Hour, MaxOpenPerCaller: 1}})
	nc := natstest.Connect(t, url)
	opened, err := openTransfer(t, nc, wire.TransferOpen{Mode: wire.TransferGet, Key: "k"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sessionCall(nc, transferSubject(opened.ID, wire.SessionClose), opened.Ref(), -1, nil, nil); err != nil {
		t.Fatalf("close of a download whose reader panicked as it closed: %v", err)
	}
	if n := e.transfers.Open(); n != 0 {
		t.Fatalf("%d transfers open after the caller closed its one, want none", n)
	}
	if _, err := openTransfer(t, nc, wire.TransferOpen{Mode: wire.TransferGet, Key: "k"}, nil); err != nil {
		t.Fatalf("the caller's next open, its share one transfer: %v", err)
	}

	// Its idle time runs out, on an engine of its own.
	url = natstest.StartServer(t).ClientURL()
	e = newEngine(t, url, panickyClose{store}, engineOptions{transfers: natsapi.TransferOptions{Idle: 100 * time.Millisecond}})
	nc = natstest.Connect(t, url)
	if _, err := openTransfer(t, nc, wire.TransferOpen{Mode: wire.TransferGet, Key: "k"}, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := e.transfers.Wait(ctx); err != nil {
		t.Fatalf("the transfers of an engine whose download went idle: %v", err)
	}
}
