package natsclient_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/adapters/secondary/objectstorage/memory"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// gatedStore holds every Put, and every Get's first read, until its gate
// opens, so an upload's chunks, or a download's reads, pile up in the
// engine.
type gatedStore struct {
	ports.ObjectStorage
	gate chan struct{}
}

func (g gatedStore) Put(ctx context.Context, key string, r io.Reader, opts ports.PutObjectOptions) (ports.ObjectInfo, error) {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return ports.ObjectInfo{}, ctx.Err()
	}
	return g.ObjectStorage.Put(ctx, key, r, opts)
}

func (g gatedStore) Get(ctx context.Context, key string, opts ports.GetObjectOptions) (io.ReadCloser, ports.ObjectInfo, error) {
	r, info, err := g.ObjectStorage.Get(ctx, key, opts)
	if err != nil {
		return nil, info, err
	}
	return gatedReader{ReadCloser: r, ctx: ctx, gate: g.gate}, info, nil
}

type gatedReader struct {
	io.ReadCloser
	ctx  context.Context
	gate chan struct{}
}

func (g gatedReader) Read(p []byte) (int, error) {
	select {
	case <-g.gate:
	case <-g.ctx.Done():
		return 0, g.ctx.Err()
	}
	return g.ReadCloser.Read(p)
}

// gated is an engine whose store holds every Put and Get until its gate
// opens, a watch on its uploads' writes and its downloads' reads, and a
// facade to it.
type gated struct {
	inner   ports.ObjectStorage
	store   gatedStore
	engine  *engine
	writes  *inFlight
	reads   *inFlight
	objects natsclient.ObjectStorage
}

func newGated(t *testing.T, transfers natsapi.TransferOptions) gated {
	t.Helper()
	url := natstest.StartServer(t).ClientURL()
	inner, err := memory.Open(t.Context(), memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	g := gated{inner: inner, store: gatedStore{ObjectStorage: inner, gate: make(chan struct{})}}
	g.engine = serveEngineWith(t, url, transfers, func(tr *natsapi.TransferHost) []natsapi.Service {
		return []natsapi.Service{natsapi.ObjectStorage(g.store, tr)}
	})
	window := transfers.Window
	if window == 0 {
		window = natsapi.DefaultTransferWindow
	}
	g.writes = watchCalls(t, url, g.engine.owner, wire.SessionWrite, window)
	g.reads = watchCalls(t, url, g.engine.owner, wire.SessionRead, window)
	g.objects = natsclient.NewObjectStorage(natsclient.New(natstest.Connect(t, url)))
	return g
}

// inFlight watches a transfer's calls of one kind (writes or reads) and
// their answers on the broker and reports the widest span of chunks out
// at once: from the oldest call not yet answered to the newest sent.
type inFlight struct {
	op         string
	mu         sync.Mutex
	unanswered map[string]int64 // the chunk each unanswered write carries, by its reply subject
	newest     int64
	most       int64
	reached    chan struct{} // closed once the span is want
	want       int64
	reachedSet bool
}

func watchCalls(t *testing.T, url, owner, op string, want int) *inFlight {
	t.Helper()
	w := &inFlight{op: op, unanswered: map[string]int64{}, reached: make(chan struct{}), want: int64(want)}
	nc := natstest.Connect(t, url)
	// Both subscriptions feed one channel from the connection's read
	// loop, so a call is always seen before its answer: the broker
	// passes the call on before the engine has it.
	msgs := make(chan *nats.Msg, 1024)
	for _, subject := range []string{wire.OwnerSubject(ports.ServiceObjectStorage, owner, op), "_INBOX.>"} {
		if _, err := nc.ChanSubscribe(subject, msgs); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		for {
			select {
			case m := <-msgs:
				w.seen(m)
			case <-done:
				return
			}
		}
	}()
	return w
}

func (w *inFlight) seen(m *nats.Msg) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if strings.HasSuffix(m.Subject, "."+w.op) {
		seq, err := strconv.ParseInt(m.Header.Get(wire.SeqHeader), 10, 64)
		if err != nil {
			panic(fmt.Sprintf("a %s without its chunk number: %v", w.op, m.Header))
		}
		w.unanswered[m.Reply] = seq
		w.newest = max(w.newest, seq)
	} else if _, ok := w.unanswered[m.Subject]; ok {
		delete(w.unanswered, m.Subject)
	} else {
		return // an answer to another kind of call
	}
	if len(w.unanswered) == 0 {
		return
	}
	oldest := w.newest
	for _, seq := range w.unanswered {
		oldest = min(oldest, seq)
	}
	w.most = max(w.most, w.newest-oldest+1)
	if w.most == w.want && !w.reachedSet {
		w.reachedSet = true
		close(w.reached)
	}
}

// waitFull waits until the transfer has a full window out.
func (w *inFlight) waitFull(t *testing.T) {
	t.Helper()
	select {
	case <-w.reached:
	case <-time.After(10 * time.Second):
		t.Fatalf("never %d %ss out at once; at most %d", w.want, w.op, w.widest())
	}
}

func (w *inFlight) widest() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.most
}

// A Put sends chunks up to a window's width past the oldest unanswered,
// never further, and the object arrives whole and in order; an
// engine that takes one chunk at a time gets one at a time.
func TestAPutKeepsTheEnginesWindowOfChunksInFlight(t *testing.T) {
	for _, window := range []int{1, 2, natsapi.DefaultTransferWindow} {
		t.Run(fmt.Sprintf("window=%d", window), func(t *testing.T) {
			g := newGated(t, natsapi.TransferOptions{ChunkSize: 1024, Window: window})

			data := make([]byte, 100<<10) // 100 chunks
			for i := range data {
				data[i] = byte(i * 31 / 7)
			}
			put := make(chan error, 1)
			go func() {
				_, err := g.objects.Put(t.Context(), "k", bytes.NewReader(data), ports.PutObjectOptions{})
				put <- err
			}()
			// The store takes nothing, so the engine's queue fills and a
			// write waits: the uploader has its whole window out.
			g.writes.waitFull(t)
			close(g.store.gate)
			if err := <-put; err != nil {
				t.Fatal(err)
			}
			if most := g.writes.widest(); most != int64(window) {
				t.Fatalf("%d chunks out at once, the window is %d", most, window)
			}
			r, _, err := g.inner.Get(t.Context(), "k", ports.GetObjectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if got, err := io.ReadAll(r); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("the object came out %d bytes, %v; want the %d put, in order", len(got), err, len(data))
			}
		})
	}
}

// A Get asks for chunks up to a window's width past the oldest
// unanswered, never further, and reads the object whole and in order;
// from an engine that answers one read at a time, it asks for one at a
// time.
func TestAGetKeepsTheEnginesWindowOfReadsInFlight(t *testing.T) {
	for _, window := range []int{1, 2, natsapi.DefaultTransferWindow} {
		t.Run(fmt.Sprintf("window=%d", window), func(t *testing.T) {
			g := newGated(t, natsapi.TransferOptions{ChunkSize: 1024, Window: window})
			data := make([]byte, 100<<10+17) // 101 chunks, the last short
			for i := range data {
				data[i] = byte(i * 31 / 7)
			}
			if _, err := g.inner.Put(t.Context(), "k", bytes.NewReader(data), ports.PutObjectOptions{}); err != nil {
				t.Fatal(err)
			}
			got := make(chan []byte, 1)
			failed := make(chan error, 1)
			go func() {
				r, _, err := g.objects.Get(t.Context(), "k", ports.GetObjectOptions{})
				if err != nil {
					failed <- err
					return
				}
				defer r.Close()
				b, err := io.ReadAll(r)
				if err != nil {
					failed <- err
					return
				}
				got <- b
			}()
			// The store yields nothing, so the first read waits on it and
			// the others behind it: the reader has its whole window out.
			g.reads.waitFull(t)
			close(g.store.gate)
			select {
			case b := <-got:
				if !bytes.Equal(b, data) {
					t.Fatalf("read %d bytes, want the %d put, in order", len(b), len(data))
				}
			case err := <-failed:
				t.Fatal(err)
			}
			if most := g.reads.widest(); most != int64(window) {
				t.Fatalf("%d reads out at once, the window is %d", most, window)
			}
		})
	}
}

// A Close from another goroutine ends a Read that waits on its window of
// reads, and both return; the transfer closes. Before, Close and Read each
// waited for the answers of the reads out, and one of them never returned.
func TestACloseEndsAReadThatWaits(t *testing.T) {
	g := newGated(t, natsapi.TransferOptions{ChunkSize: 1024})
	if _, err := g.inner.Put(t.Context(), "k", bytes.NewReader(make([]byte, 10<<10)), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	r, _, err := g.objects.Get(t.Context(), "k", ports.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := r.Read(make([]byte, 10))
		read <- err
	}()
	g.reads.waitFull(t) // the store holds the first read, the others wait behind it
	closed := make(chan error, 1)
	go func() { closed <- r.Close() }()
	for what, ch := range map[string]chan error{"Close": closed, "the Read": read} {
		select {
		case err := <-ch:
			if what == "the Read" && err == nil {
				t.Fatal("the Read that waited returned no error after Close")
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s never returned", what)
		}
	}
	if _, err := r.Read(make([]byte, 10)); err == nil {
		t.Fatal("a Read after Close returned no error")
	}
	awaitNoTransfers(t, g, "after Close")
}

// awaitNoTransfers waits for the engine of g to close every transfer: a
// close whose session a call still holds is answered at once and ends
// when that call lets go.
func awaitNoTransfers(t *testing.T, g gated, when string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for g.engine.transfers.Open() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d transfers still open 10 s %s", g.engine.transfers.Open(), when)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// failingReader gives n bytes, then fails.
type failingReader struct{ n int }

var errSource = errors.New("the source failed")

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errSource
	}
	k := min(len(p), f.n)
	f.n -= k
	return k, nil
}

// A source that fails with chunks still unanswered fails the Put with its
// error; the transfer closes and no object, whole or part, is left.
func TestAPutWhoseSourceFailsWithChunksInFlightLeavesNothing(t *testing.T) {
	g := newGated(t, natsapi.TransferOptions{ChunkSize: 1024})
	put := make(chan error, 1)
	go func() {
		_, err := g.objects.Put(t.Context(), "k", &failingReader{n: 10 << 10}, ports.PutObjectOptions{})
		put <- err
	}()
	// The source fails once 10 chunks are read; with the store held, the
	// window is full by then.
	g.writes.waitFull(t)
	close(g.store.gate)
	if err := <-put; !errors.Is(err, errSource) {
		t.Fatalf("Put: %v, want the source's error", err)
	}
	awaitNoTransfers(t, g, "after the Put failed")
	if _, err := g.inner.Stat(t.Context(), "k"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Stat after the failed Put: %v, want not found", err)
	}
}

// pacedStore is a slow store: its Put takes one chunk's bytes of its
// source per tick.
type pacedStore struct {
	ports.ObjectStorage
	chunk int
	every time.Duration
}

func (p pacedStore) Put(ctx context.Context, key string, r io.Reader, opts ports.PutObjectOptions) (ports.ObjectInfo, error) {
	tick := time.NewTicker(p.every)
	defer tick.Stop()
	return p.ObjectStorage.Put(ctx, key, &pacedReader{r: r, chunk: p.chunk, tick: tick.C}, opts)
}

type pacedReader struct {
	r     io.Reader
	chunk int
	left  int // what may be read before the next tick
	tick  <-chan time.Time
}

func (p *pacedReader) Read(b []byte) (int, error) {
	if p.left == 0 {
		<-p.tick
		p.left = p.chunk
	}
	n, err := p.r.Read(b[:min(len(b), p.left)])
	p.left -= n
	return n, err
}

// A store that takes a chunk in half the client's timeout keeps up with an
// upload, with a window as without one: the newest chunk of a full window
// waits on every chunk before it, and has the time for each.
func TestAStoreThatKeepsUpWithOneChunkAtATimeKeepsUpWithAWindow(t *testing.T) {
	const timeout = time.Second
	for _, window := range []int{1, natsapi.DefaultTransferWindow} {
		t.Run(fmt.Sprintf("window=%d", window), func(t *testing.T) {
			url := natstest.StartServer(t).ClientURL()
			inner, err := memory.Open(t.Context(), memory.Config{})
			if err != nil {
				t.Fatal(err)
			}
			serveEngineWith(t, url, natsapi.TransferOptions{ChunkSize: 1024, Window: window}, func(tr *natsapi.TransferHost) []natsapi.Service {
				return []natsapi.Service{natsapi.ObjectStorage(pacedStore{ObjectStorage: inner, chunk: 1024, every: timeout / 2}, tr)}
			})
			objects := natsclient.NewObjectStorage(natsclient.New(natstest.Connect(t, url), natsclient.WithTimeout(timeout)))
			data := bytes.Repeat([]byte("0123456789abcdef"), 12<<10/16) // 12 chunks
			if _, err := objects.Put(t.Context(), "k", bytes.NewReader(data), ports.PutObjectOptions{}); err != nil {
				t.Fatalf("a Put to a store that takes a chunk every %v, %v a call: %v", timeout/2, timeout, err)
			}
		})
	}
}

// A Put given up with its window out returns at once with its context's
// error, and the engine closes the transfer and stores nothing.
func TestAPutGivenUpWithChunksInFlightLeavesNothing(t *testing.T) {
	g := newGated(t, natsapi.TransferOptions{ChunkSize: 1024})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	put := make(chan error, 1)
	go func() {
		_, err := g.objects.Put(ctx, "k", bytes.NewReader(make([]byte, 100<<10)), ports.PutObjectOptions{})
		put <- err
	}()
	g.writes.waitFull(t)
	cancel()
	select {
	case err := <-put:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Put: %v, want its context's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the Put did not return once given up")
	}
	awaitNoTransfers(t, g, "after the Put was given up")
	close(g.store.gate)
	if _, err := g.inner.Stat(t.Context(), "k"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Stat after the Put was given up: %v, want not found", err)
	}
}
