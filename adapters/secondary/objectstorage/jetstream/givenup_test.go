package jetstream_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/secondary/objectstorage/jetstream"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// cutOnDescribe dials connections that, armed, lose the connection when
// they first send an object's description, before it reaches the server,
// and give its caller up at that moment, as a fence does; the connection
// dials again only once reconnect is closed: its broker is away meanwhile.
type cutOnDescribe struct {
	meta      string
	armed     atomic.Bool
	once      sync.Once
	cancel    context.CancelFunc
	cut       chan struct{}
	reconnect chan struct{}
}

func (p *cutOnDescribe) Dial(network, address string) (net.Conn, error) {
	select {
	case <-p.cut:
		<-p.reconnect
	default:
	}
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return cutConn{Conn: c, p: p}, nil
}

type cutConn struct {
	net.Conn
	p *cutOnDescribe
}

func (c cutConn) Write(b []byte) (int, error) {
	if c.p.armed.Load() && strings.Contains(string(b), c.p.meta) {
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

// givenUp is an old engine's store and its successor's on one bucket
// whose object "o" holds content. The old store's connection, once
// armed, is lost as its next description leaves, and call, the context of
// the old store's next call, is cancelled at that moment; the connection
// comes back only once reconnect is closed. It keeps no reconnect buffer,
// as the engine's store connections do not.
type givenUp struct {
	ctx            context.Context // the test's own, bounded
	call           context.Context
	old, successor *jetstream.Store
	p              *cutOnDescribe
}

func newGivenUp(t *testing.T, bucket, content string) givenUp {
	t.Helper()
	url := natstest.StartProcess(t, server)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	call, cancelCall := context.WithCancel(ctx)
	t.Cleanup(cancelCall)
	p := &cutOnDescribe{meta: "PUB $O." + bucket + ".M.", cancel: cancelCall,
		cut: make(chan struct{}), reconnect: make(chan struct{})}
	nc, err := nats.Connect(url, nats.SetCustomDialer(p), nats.ReconnectBufSize(-1),
		nats.ReconnectWait(10*time.Millisecond), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	old, err := jetstream.Open(ctx, jetstream.Config{Bucket: bucket}, nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.Close() })
	if _, err := old.Put(ctx, "o", bytes.NewReader([]byte(content)), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	return givenUp{ctx: ctx, call: call, old: old, successor: open(t, url, jetstream.Config{Bucket: bucket}), p: p}
}

// run arms the cut, runs f (the old store's call) and waits until its
// description was cut off, then runs meanwhile (the successor at work),
// lets the connection come back and waits for f to return.
func (g givenUp) run(t *testing.T, what string, f func() error, meanwhile func()) {
	t.Helper()
	g.p.armed.Store(true)
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case <-g.p.cut:
	case <-g.ctx.Done():
		t.Fatalf("the %s never sent its description", what)
	}
	meanwhile()
	close(g.p.reconnect)
	select {
	case err := <-done:
		t.Logf("%s: %v", what, err)
	case <-g.ctx.Done():
		t.Fatalf("the %s given up never returned", what)
	}
}

// A Delete whose caller gave up (its engine fenced itself) while the
// deleted description had not reached the server sends it no more: sent
// once the connection is back, it would delete, while a successor serves,
// an object the successor serves. The store's connection keeps no
// reconnect buffer for that reason (ADR 0002); the Delete sent the
// description again on a context of its own for up to 30 s.
func TestADeleteGivenUpBeforeItsDescriptionLeftDoesNotDeleteLater(t *testing.T) {
	g := newGivenUp(t, "GIVENUPDELETE", "kept")
	g.run(t, "Delete", func() error { return g.old.Delete(g.call, "o") }, func() {
		if _, err := g.successor.Stat(g.ctx, "o"); err != nil {
			t.Fatalf("the successor's Stat: %v", err)
		}
	})
	if _, err := g.successor.Stat(g.ctx, "o"); err != nil {
		t.Fatalf("the object the successor serves, after the given-up Delete: %v; the deletion landed after its caller gave up", err)
	}
}

// A Put whose caller gave up while its description had not reached the
// server sends it no more, for the same reason: sent once the connection
// is back, it would replace, while a successor served, the object the
// successor served. Before, it did, and reported success.
func TestAPutGivenUpBeforeItsDescriptionLeftDoesNotLandLater(t *testing.T) {
	g := newGivenUp(t, "GIVENUPPUT", "served")
	var served ports.ObjectInfo
	g.run(t, "Put", func() error {
		_, err := g.old.Put(g.call, "o", bytes.NewReader([]byte("given up")), ports.PutObjectOptions{})
		return err
	}, func() {
		var err error
		if served, err = g.successor.Stat(g.ctx, "o"); err != nil {
			t.Fatalf("the successor's Stat: %v", err)
		}
	})
	now, err := g.successor.Stat(g.ctx, "o")
	if err != nil || now.ETag != served.ETag {
		t.Fatalf("the object the successor serves, after the given-up Put: %+v, %v; want ETag %s: the description landed after its caller gave up", now, err, served.ETag)
	}
}

// cancelOnReread is a client connection that, once armed, ends a caller's
// context the moment the client reads a message of the bucket's stream
// after it has sent an object's description: a plain Put whose
// description the stream refused, another write having come first, reads
// the key again, and its caller gives up during that read.
type cancelOnReread struct {
	meta, read string
	armed      atomic.Bool
	described  atomic.Bool
	cancel     context.CancelFunc
	once       sync.Once
}

func (c *cancelOnReread) Dial(network, address string) (net.Conn, error) {
	conn, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return rereadConn{Conn: conn, c: c}, nil
}

type rereadConn struct {
	net.Conn
	c *cancelOnReread
}

func (w rereadConn) Write(b []byte) (int, error) {
	if w.c.armed.Load() {
		switch {
		case strings.Contains(string(b), w.c.meta):
			w.c.described.Store(true)
		case w.c.described.Load() && strings.Contains(string(b), w.c.read):
			w.c.once.Do(w.c.cancel)
		}
	}
	return w.Conn.Write(b)
}

// A Put whose caller gave up before its description was sent again knows
// that nothing of it was stored: it purges its chunks and fails at once.
// Here its first description was refused, another write having come
// first, and its caller gave up while it read the key again, so the
// second was never sent. Before, it watched for 5 s for a description
// that could not come, then failed with the outcome unknown and kept its
// chunks, which no description names, in the stream for good.
func TestAPutGivenUpBeforeItsDescriptionWasSentLeavesNoChunks(t *testing.T) {
	url := natstest.StartProcess(t, server)
	const bucket = "GIVENUPUNSENT"
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	putCtx, cancelPut := context.WithCancel(ctx)
	defer cancelPut()
	dialer := &cancelOnReread{meta: "PUB $O." + bucket + ".M.", read: "$JS.API.STREAM.MSG.GET.OBJ_" + bucket, cancel: cancelPut}
	old, err := jetstream.Open(ctx, jetstream.Config{Bucket: bucket}, natstest.Connect(t, url, nats.SetCustomDialer(dialer)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.Close() })
	successor := open(t, url, jetstream.Config{Bucket: bucket})

	// The old engine's Put has read the key and waits for its content
	// while the successor writes the object.
	source := &gatedReader{open: make(chan struct{}), content: strings.NewReader("given up")}
	done := make(chan error, 1)
	go func() {
		_, err := old.Put(putCtx, "o", source, ports.PutObjectOptions{})
		done <- err
	}()
	if _, err := successor.Put(ctx, "o", strings.NewReader("served"), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	dialer.armed.Store(true)
	close(source.open)
	var putErr error
	select {
	case putErr = <-done:
	case <-ctx.Done():
		t.Fatal("the Put did not return")
	}
	if putCtx.Err() == nil {
		t.Fatal("the caller's context did not end as the Put read the key again")
	}
	if putErr == nil {
		t.Fatal("a Put whose caller gave up before its description was sent returned no error")
	}
	// Only the successor's object's chunks are left.
	if subjects := chunkSubjects(t, url, bucket); len(subjects) != 1 {
		t.Fatalf("the chunks of %d objects are in the stream after a Put that sent no description failed (%v), want only the served object's", len(subjects), putErr)
	}
}

// landedThenOvertaken is a client connection that, once armed, lets an
// object's description reach the broker, then holds back everything the
// broker sends and ends the caller's context, as a fence does with the
// write on its way; the client's next read of a message of the bucket's
// stream is held before it leaves until release, so another write can
// come first. reread is closed when that read is held.
type landedThenOvertaken struct {
	meta, read string
	cancel     context.CancelFunc
	armed      atomic.Bool

	mu       sync.Mutex
	held     bool
	once     sync.Once
	reread   chan struct{}
	released chan struct{}
	release  func()
}

func newLandedThenOvertaken(bucket string, cancel context.CancelFunc) *landedThenOvertaken {
	p := &landedThenOvertaken{
		meta: "PUB $O." + bucket + ".M.", read: "$JS.API.STREAM.MSG.GET.OBJ_" + bucket, cancel: cancel,
		reread: make(chan struct{}), released: make(chan struct{}),
	}
	var once sync.Once
	p.release = func() { once.Do(func() { close(p.released) }) }
	return p
}

func (p *landedThenOvertaken) isHeld() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

func (p *landedThenOvertaken) Dial(network, address string) (net.Conn, error) {
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return overtakenConn{Conn: c, p: p}, nil
}

type overtakenConn struct {
	net.Conn
	p *landedThenOvertaken
}

func (c overtakenConn) Write(b []byte) (int, error) {
	p := c.p
	if p.armed.Load() {
		switch {
		case strings.Contains(string(b), p.meta) && !p.isHeld():
			p.mu.Lock()
			p.held = true // before the broker can answer
			p.mu.Unlock()
			n, err := c.Conn.Write(b)
			p.cancel()
			return n, err
		case p.isHeld() && strings.Contains(string(b), p.read):
			p.once.Do(func() { close(p.reread) })
			<-p.released
		}
	}
	return c.Conn.Write(b)
}

func (c overtakenConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if c.p.isHeld() {
		<-c.p.released
	}
	return n, err
}

// A Put whose caller gave up while its description was on its way, the
// description stored and then replaced by another write before the Put
// read whether it landed, leaves no chunks that no description names: the
// object its description replaced is gone whichever write replaced it, so
// the Put purges that object's chunks, as it does when it is answered.
// Before, it took the other write's description for a sign that its own
// was never stored, failed with the outcome unknown and purged nothing;
// the other write purged only the chunks of the description it replaced,
// the Put's own, and the chunks of the object before stayed in the stream
// for good.
func TestAPutGivenUpWhoseDescriptionLandedAndWasReplacedLeavesNoStrayChunks(t *testing.T) {
	url := natstest.StartProcess(t, server)
	const bucket = "LANDEDOVERTAKEN"
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	putCtx, cancelPut := context.WithCancel(ctx)
	defer cancelPut()
	p := newLandedThenOvertaken(bucket, cancelPut)
	t.Cleanup(p.release)
	old, err := jetstream.Open(ctx, jetstream.Config{Bucket: bucket}, natstest.Connect(t, url, nats.SetCustomDialer(p)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.Close() })
	if _, err := old.Put(ctx, "o", strings.NewReader("first"), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	successor := open(t, url, jetstream.Config{Bucket: bucket})

	p.armed.Store(true)
	done := make(chan error, 1)
	go func() {
		_, err := old.Put(putCtx, "o", strings.NewReader("given up"), ports.PutObjectOptions{})
		done <- err
	}()
	select {
	case <-p.reread:
	case <-ctx.Done():
		t.Fatal("the Put given up never read whether its description landed")
	}
	// The Put's description is stored; the successor replaces it before
	// the Put learns so.
	if _, err := successor.Put(ctx, "o", strings.NewReader("served"), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	p.release()
	var putErr error
	select {
	case putErr = <-done:
	case <-ctx.Done():
		t.Fatal("the Put given up never returned")
	}
	t.Logf("Put: %v", putErr)
	if subjects := chunkSubjects(t, url, bucket); len(subjects) != 1 {
		t.Fatalf("the chunks of %d objects are in the stream, want only the served object's: %v", len(subjects), subjects)
	}
}
