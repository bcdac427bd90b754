package jetstream_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/abi-engine/engine/adapters/secondary/document/jetstream"
	"github.com/abi-engine/engine/adapters/secondary/internal/jstest"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// purgeStopper dials connections that stop their first stream purge
// request: they hold it until release is closed (a store paused between a
// drop's marker removal and its purge), or, with cut, close the connection
// instead (an engine that dies there).
type purgeStopper struct {
	cut     bool
	once    sync.Once
	held    chan struct{}
	release chan struct{}
}

func (p *purgeStopper) Dial(network, address string) (net.Conn, error) {
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return stoppingConn{Conn: c, p: p}, nil
}

type stoppingConn struct {
	net.Conn
	p *purgeStopper
}

func (c stoppingConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte("$JS.API.STREAM.PURGE.")) {
		if c.p.cut {
			c.Conn.Close()
			return 0, errors.New("cut off before the purge left")
		}
		c.p.once.Do(func() {
			close(c.p.held)
			<-c.p.release
		})
	}
	return c.Conn.Write(b)
}

// openStopped opens a store on a connection of p's.
func openStopped(t *testing.T, url string, c jetstream.Config, p *purgeStopper) *jetstream.Store {
	t.Helper()
	nc, err := nats.Connect(url, nats.SetCustomDialer(p), nats.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	s, err := jetstream.Open(t.Context(), c, nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// A drop whose purge lands after the collection was made again, by this
// engine or by its successor, removes only what was written before its
// delete: the documents written to the new collection, acknowledged, stay.
func TestALateDropsPurgeLeavesTheCollectionMadeAgain(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	c := jetstream.Config{Bucket: jstest.Bucket(t), Replicas: 1}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	h := &purgeStopper{held: make(chan struct{}), release: make(chan struct{})}
	dropper := openStopped(t, url, c, h)
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

// A drop whose purge never ran (its engine died between the marker's
// removal and the purge) leaves its documents in the stream, hidden; the
// next drop of the collection takes them with its own.
func TestADropSweepsTheDocumentsAnEarlierDropLeft(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	c := jetstream.Config{Bucket: jstest.Bucket(t), Replicas: 1}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s := open(t, url, c)
	if err := s.EnsureCollection(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "c", "old", map[string]any{"n": 1}, ports.Cond{}); err != nil {
		t.Fatal(err)
	}
	dying := openStopped(t, url, c, &purgeStopper{cut: true})
	if err := dying.DropCollection(ctx, "c"); err == nil {
		t.Fatal("a drop cut off before its purge reported success")
	}

	if err := s.EnsureCollection(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "c", "new", map[string]any{"n": 2}, ports.Cond{}); err != nil {
		t.Fatal(err)
	}
	if err := s.DropCollection(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if left := documentSubjects(t, url, c.Bucket, "c"); len(left) != 0 {
		t.Fatalf("documents of dropped collections stay in the stream: %v", left)
	}
}

// cancelOnWrite dials connections that call cancel when they first send a
// message holding needle, just before it leaves: the caller gives up the
// moment its write is on its way to the server.
type cancelOnWrite struct {
	needle []byte
	armed  atomic.Bool
	once   sync.Once
	cancel context.CancelFunc
}

func (p *cancelOnWrite) Dial(network, address string) (net.Conn, error) {
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return cancellingConn{Conn: c, p: p}, nil
}

type cancellingConn struct {
	net.Conn
	p *cancelOnWrite
}

func (c cancellingConn) Write(b []byte) (int, error) {
	if c.p.armed.Load() && bytes.Contains(b, c.p.needle) {
		c.p.once.Do(c.p.cancel)
	}
	return c.Conn.Write(b)
}

// A drop whose caller gives up once the removal of the collection's marker
// is on its way either finishes, its documents purged, or leaves the
// collection whole. Before, the drop failed with the cancellation after
// the marker was gone: the collection no longer showed, and its documents
// stayed in the stream for good, unless the collection was dropped again.
func TestADropCancelledOnceItsMarkerRemovalIsSentFinishes(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	c := jetstream.Config{Bucket: jstest.Bucket(t), Replicas: 1}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	dropCtx, cancelDrop := context.WithCancel(ctx)
	defer cancelDrop()
	p := &cancelOnWrite{needle: []byte("$KV." + c.Bucket + ".c.c "), cancel: cancelDrop}
	nc, err := nats.Connect(url, nats.SetCustomDialer(p))
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
	for i := range 5 {
		if _, err := other.Put(ctx, "c", fmt.Sprint(i), map[string]any{"n": i}, ports.Cond{}); err != nil {
			t.Fatal(err)
		}
	}

	p.armed.Store(true)
	dropErr := dropper.DropCollection(dropCtx, "c")
	if dropCtx.Err() == nil {
		t.Fatal("the drop sent no removal of the collection's marker")
	}
	t.Logf("DropCollection: %v", dropErr)

	names, err := other.Collections(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(names, "c") {
		// Left whole: every document is still there.
		n, err := other.Count(ctx, "c", nil)
		if err != nil || n != 5 {
			t.Fatalf("the collection the cancelled drop left holds %d documents (%v), want 5", n, err)
		}
		return
	}
	if dropErr != nil {
		t.Errorf("the collection is gone and the drop returned %v", dropErr)
	}
	if left := documentSubjects(t, url, c.Bucket, "c"); len(left) != 0 {
		t.Fatalf("the collection is dropped (the drop returned %v) and %d of its documents stay in the stream: %v", dropErr, len(left), left)
	}
}

// A collection made again after a drop whose purge never ran (its engine
// died between the marker's removal and the purge) takes the documents
// that drop left: they are of a generation no read reaches any more, and
// nothing else would remove them unless the collection were dropped again.
// Before, they stayed in the stream, hidden, beside the new collection.
func TestACollectionMadeAgainSweepsTheDocumentsADyingDropLeft(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	c := jetstream.Config{Bucket: jstest.Bucket(t), Replicas: 1}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s := open(t, url, c)
	if err := s.EnsureCollection(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := s.Put(ctx, "c", fmt.Sprint("old", i), map[string]any{"n": i}, ports.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	dying := openStopped(t, url, c, &purgeStopper{cut: true})
	if err := dying.DropCollection(ctx, "c"); err == nil {
		t.Fatal("a drop cut off before its purge reported success")
	}

	if err := s.EnsureCollection(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "c", "new", map[string]any{"n": 9}, ports.Cond{}); err != nil {
		t.Fatal(err)
	}
	if left := documentSubjects(t, url, c.Bucket, "c"); len(left) != 1 {
		t.Fatalf("the collection made again has 1 document; the stream holds %d under it: %v", len(left), left)
	}
	if got, err := s.Get(ctx, "c", "new"); err != nil || got.Data["n"] != float64(9) {
		t.Fatalf("the new document: %+v, %v", got, err)
	}
}

// cutOnWrite dials connections that, armed, lose the connection when they
// first send a message holding needle, before it reaches the server, and
// give its caller up at that moment, as a fence does; the connection then
// dials again only once reconnect is closed: its broker is away meanwhile.
type cutOnWrite struct {
	needle    []byte
	armed     atomic.Bool
	once      sync.Once
	cancel    context.CancelFunc
	cut       chan struct{}
	reconnect chan struct{}
}

func (p *cutOnWrite) Dial(network, address string) (net.Conn, error) {
	select {
	case <-p.cut:
		<-p.reconnect
	default:
	}
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return cuttingConn{Conn: c, p: p}, nil
}

type cuttingConn struct {
	net.Conn
	p *cutOnWrite
}

func (c cuttingConn) Write(b []byte) (int, error) {
	if c.p.armed.Load() && bytes.Contains(b, c.p.needle) {
		cut := false
		c.p.once.Do(func() { cut = true })
		if cut {
			c.p.cancel()
			close(c.p.cut)
			c.Conn.Close()
			return 0, errors.New("the connection was lost before the write left")
		}
	}
	return c.Conn.Write(b)
}

// A drop whose caller gave up (its engine fenced itself) while the removal
// of the collection's marker had not reached the server sends it no more:
// sent once the connection is back, it would land while a successor
// serves, drop the collection under it and purge the documents the
// successor wrote to it and acknowledged. The store's connection keeps no
// reconnect buffer for that reason; before, the drop sent the removal again
// on a context of its own for up to 30 s, and did just that.
func TestADropGivenUpBeforeItsRemovalLeftDoesNotDropTheCollectionLater(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	c := jetstream.Config{Bucket: jstest.Bucket(t), Replicas: 1}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dropCtx, cancelDrop := context.WithCancel(ctx)
	defer cancelDrop()
	p := &cutOnWrite{needle: []byte("$KV." + c.Bucket + ".c.c "), cancel: cancelDrop,
		cut: make(chan struct{}), reconnect: make(chan struct{})}
	// As the engine dials its stores' connections: no reconnect buffer.
	nc, err := nats.Connect(url, nats.SetCustomDialer(p), nats.ReconnectBufSize(-1),
		nats.ReconnectWait(10*time.Millisecond), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	old, err := jetstream.Open(ctx, c, nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.Close() })
	successor := open(t, url, c)
	if err := old.EnsureCollection(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Put(ctx, "c", "before", map[string]any{"n": 1}, ports.Cond{}); err != nil {
		t.Fatal(err)
	}

	p.armed.Store(true)
	dropped := make(chan error, 1)
	go func() { dropped <- old.DropCollection(dropCtx, "c") }()
	select {
	case <-p.cut:
	case <-ctx.Done():
		t.Fatal("the drop never sent the removal of the collection's marker")
	}
	// The successor serves and writes to the collection, which is there.
	if _, err := successor.Put(ctx, "c", "mine", map[string]any{"n": 2}, ports.Cond{}); err != nil {
		t.Fatalf("the successor's write to the collection: %v", err)
	}
	// The old engine's connection comes back.
	close(p.reconnect)
	select {
	case err := <-dropped:
		t.Logf("DropCollection: %v", err)
	case <-ctx.Done():
		t.Fatal("the drop given up never returned")
	}
	if _, err := successor.Get(ctx, "c", "mine"); err != nil {
		t.Fatalf("the successor's acknowledged document after the given-up drop: %v; the drop landed after its caller gave up", err)
	}
}

// documentSubjects is what the stream of bucket holds under collection's
// documents, of every generation, live or not: subject to message count.
func documentSubjects(t *testing.T, url, bucket, collection string) map[string]uint64 {
	t.Helper()
	js, err := natsjs.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(t.Context(), "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context(), natsjs.WithSubjectFilter("$KV."+bucket+".d."+collection+".>"))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects
}

// A drop whose purge never ran (its engine died between the marker's
// removal and the purge) leaves its documents in the stream, hidden; the
// store's sweeps purge them though the collection is never made or
// dropped again, and leave the documents of every live collection. Before,
// only a making or a drop of the collection took them: they stayed in the
// stream for good.
func TestTheDocumentsOfADyingDropAreSweptThoughTheCollectionIsNeverMadeAgain(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	c := jetstream.Config{Bucket: jstest.Bucket(t), Replicas: 1}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s := open(t, url, c)
	for _, name := range []string{"gone", "kept"} {
		if err := s.EnsureCollection(ctx, name); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if _, err := s.Put(ctx, name, fmt.Sprint(i), map[string]any{"n": i}, ports.Cond{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	dying := openStopped(t, url, c, &purgeStopper{cut: true})
	if err := dying.DropCollection(ctx, "gone"); err == nil {
		t.Fatal("a drop cut off before its purge reported success")
	}
	if left := documentSubjects(t, url, c.Bucket, "gone"); len(left) != 3 {
		t.Fatalf("the stream holds %d documents under the dropped collection before the sweep, want its 3 (the test's cut did not hold): %v", len(left), left)
	}

	nc := natstest.Connect(t, url)
	successor, err := jetstream.OpenSweeping(ctx, c, nc, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = successor.Close() })
	for left := documentSubjects(t, url, c.Bucket, "gone"); len(left) != 0; left = documentSubjects(t, url, c.Bucket, "gone") {
		if ctx.Err() != nil {
			t.Fatalf("the documents of the dropped collection stay in the stream: %v", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Close waits for the sweep under way: every sweep has ended.
	_ = successor.Close()
	if left := documentSubjects(t, url, c.Bucket, "kept"); len(left) != 3 {
		t.Fatalf("the stream holds %d documents under the live collection after the sweeps, want its 3: %v", len(left), left)
	}
	if n, err := s.Count(ctx, "kept", nil); err != nil || n != 3 {
		t.Fatalf("the live collection holds %d documents after the sweeps (%v), want 3", n, err)
	}
}
