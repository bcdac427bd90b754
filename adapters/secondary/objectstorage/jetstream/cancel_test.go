package jetstream_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/abi-engine/engine/adapters/secondary/objectstorage/jetstream"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// heldAck is a client connection that, once armed, holds back everything
// the broker sends from the moment the client writes an object's
// description: the broker stores the description, but its acknowledgement
// does not reach the client until release. described is closed when the
// description is sent; moved when the client next sends the description
// again, a purge of the bucket's stream or a read of a message of it,
// which it does only once it has given up waiting for that
// acknowledgement.
type heldAck struct {
	meta, purge, read string
	armed             atomic.Bool

	mu                sync.Mutex
	held              bool
	sent              int
	described, moved  chan struct{}
	released          chan struct{}
	releaseOnce, move sync.Once
}

func newHeldAck(bucket string) *heldAck {
	return &heldAck{
		meta: "PUB $O." + bucket + ".M.", purge: "$JS.API.STREAM.PURGE.OBJ_" + bucket, read: "$JS.API.STREAM.MSG.GET.OBJ_" + bucket,
		described: make(chan struct{}), moved: make(chan struct{}), released: make(chan struct{}),
	}
}

func (h *heldAck) Dial(network, address string) (net.Conn, error) {
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return &heldConn{Conn: c, h: h}, nil
}

func (h *heldAck) release() { h.releaseOnce.Do(func() { close(h.released) }) }

type heldConn struct {
	net.Conn
	h *heldAck
}

func (c *heldConn) Write(b []byte) (int, error) {
	h := c.h
	if h.armed.Load() {
		h.mu.Lock()
		switch {
		case strings.Contains(string(b), h.meta):
			h.sent++
			if h.sent == 1 {
				h.held = true // before the broker can answer
				close(h.described)
			} else {
				h.move.Do(func() { close(h.moved) })
			}
		case h.sent > 0 && (strings.Contains(string(b), h.purge) || strings.Contains(string(b), h.read)):
			h.move.Do(func() { close(h.moved) })
		}
		h.mu.Unlock()
	}
	return c.Conn.Write(b)
}

func (c *heldConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.h.mu.Lock()
	held := c.h.held
	c.h.mu.Unlock()
	if held {
		<-c.h.released
	}
	return n, err
}

// A Put whose caller gives up while the object's description is being
// written, after the broker stored it but before its acknowledgement came
// back, must not leave a description whose chunks are gone: the object it
// reports, or the one the key then holds, reads back whole. Before, the
// Put failed with the caller's cancellation and purged its own chunks,
// though the stored description named them: Stat showed the new object
// and every Get of it failed.
func TestAPutCancelledWhileItsDescriptionIsWrittenLeavesAReadableObject(t *testing.T) {
	url := natstest.StartProcess(t, server)
	const bucket = "CANCELLED"
	h := newHeldAck(bucket)
	t.Cleanup(h.release)
	ctx, cancelOpen := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancelOpen()
	s, err := jetstream.Open(ctx, jetstream.Config{Bucket: bucket}, natstest.Connect(t, url, nats.SetCustomDialer(h)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := s.Put(t.Context(), "o", strings.NewReader("old"), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	content := bytes.Repeat([]byte("new object "), 40000) // 440,000 bytes: four chunks
	h.armed.Store(true)
	putCtx, cancel := context.WithCancel(t.Context())
	defer cancel()
	type result struct {
		info ports.ObjectInfo
		err  error
	}
	done := make(chan result, 1)
	go func() {
		info, err := s.Put(putCtx, "o", bytes.NewReader(content), ports.PutObjectOptions{})
		done <- result{info, err}
	}()
	wait := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatalf("no %s within 30 s", what)
		}
	}
	wait(h.described, "description written")
	cancel() // the caller gives up with the description stored, its acknowledgement on its way
	wait(h.moved, "purge or resend after the cancellation")
	h.release()
	var res result
	select {
	case res = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("Put did not return")
	}
	t.Logf("Put: %+v, %v", res.info, res.err)

	reader := open(t, url, jetstream.Config{Bucket: bucket})
	r, info, err := reader.Get(t.Context(), "o", ports.GetObjectOptions{})
	if err != nil {
		t.Fatalf("Get after the cancelled Put (which returned %v): %v", res.err, err)
	}
	got, err := io.ReadAll(r)
	_ = r.Close()
	if err != nil {
		t.Fatalf("read %q (ETag %s) after the cancelled Put (which returned %v): %v", info.Key, info.ETag, res.err, err)
	}
	switch {
	case bytes.Equal(got, content):
	case string(got) == "old" && res.err != nil:
	default:
		t.Fatalf("after a Put that returned %v the object holds %d bytes (%.20q)", res.err, len(got), got)
	}
	if res.err == nil && res.info.ETag != info.ETag {
		t.Fatalf("Put reported ETag %s; the object has %s", res.info.ETag, info.ETag)
	}
}

// A Delete whose caller gives up after the deleted description is stored,
// before its acknowledgement came back, still removes the object's chunks:
// nothing else ever would, since no description names them any more.
// Before, the Delete failed with the caller's cancellation and left the
// chunks in the stream for good, though the object was gone.
func TestADeleteCancelledWhileItsDescriptionIsWrittenLeavesNoChunks(t *testing.T) {
	url := natstest.StartProcess(t, server)
	const bucket = "CANCELLEDDELETE"
	h := newHeldAck(bucket)
	t.Cleanup(h.release)
	ctx, cancelOpen := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancelOpen()
	s, err := jetstream.Open(ctx, jetstream.Config{Bucket: bucket}, natstest.Connect(t, url, nats.SetCustomDialer(h)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := s.Put(t.Context(), "o", bytes.NewReader(bytes.Repeat([]byte("x"), 300<<10)), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	h.armed.Store(true)
	delCtx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Delete(delCtx, "o") }()
	select {
	case <-h.described:
	case <-time.After(30 * time.Second):
		t.Fatal("no deleted description written within 30 s")
	}
	cancel() // the caller gives up with the deletion stored, its acknowledgement on its way
	var delErr error
	returned := false
	select {
	case <-h.moved: // it resent the deletion or purged: it went on waiting
	case delErr = <-done:
		returned = true
	case <-time.After(30 * time.Second):
		t.Fatal("Delete neither returned nor went on within 30 s")
	}
	h.release()
	if !returned {
		select {
		case delErr = <-done:
		case <-time.After(60 * time.Second):
			t.Fatal("Delete did not return")
		}
	}
	t.Logf("Delete: %v", delErr)

	reader := open(t, url, jetstream.Config{Bucket: bucket})
	if _, err := reader.Stat(t.Context(), "o"); !errors.Is(err, ports.ErrNotFound) {
		if delErr == nil {
			t.Fatalf("Stat after a Delete that returned nil: %v, want not found", err)
		}
		return // the deletion was not stored: the object and its chunks stay
	}
	info, err := objectStream(t, natstest.Connect(t, url), bucket).Info(t.Context(), natsjs.WithSubjectFilter("$O."+bucket+".C.>"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(info.State.Subjects); n != 0 {
		t.Fatalf("the object is deleted (Delete returned %v) and the chunks of %d objects are still in the stream", delErr, n)
	}
}

// cancelOnDescribe is a client connection that, once armed, ends a
// caller's context the moment the client sends an object's description:
// the caller gives up with that write on its way, as a fence ends the
// calls its engine runs.
type cancelOnDescribe struct {
	meta   string
	armed  atomic.Bool
	cancel context.CancelFunc
	once   sync.Once
}

func (c *cancelOnDescribe) Dial(network, address string) (net.Conn, error) {
	conn, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return &cancellingConn{Conn: conn, c: c}, nil
}

type cancellingConn struct {
	net.Conn
	c *cancelOnDescribe
}

func (w *cancellingConn) Write(b []byte) (int, error) {
	if w.c.armed.Load() && strings.Contains(string(b), w.c.meta) {
		w.c.once.Do(w.c.cancel)
	}
	return w.Conn.Write(b)
}

// gatedReader gives its content once open closes.
type gatedReader struct {
	open    chan struct{}
	content io.Reader
}

func (r *gatedReader) Read(p []byte) (int, error) {
	<-r.open
	return r.content.Read(p)
}

// A Put's description goes on to its outcome after the caller gives up,
// so that the outcome is known; but once the stream has refused it,
// another write having come first, nothing is left to learn, and a caller
// that gave up has no write to finish. An engine that fenced itself gave
// its calls up so that none of them would write beside its successor:
// such a Put must store nothing, not write over the successor's object.
// Before, a plain Put refused so read the key again and wrote over the
// newer object, for up to 30 s after its caller had given up, and
// reported success.
func TestAPutWhoseCallerGaveUpDoesNotWriteOverAnObjectWrittenMeanwhile(t *testing.T) {
	url := natstest.StartProcess(t, server)
	const bucket = "OVERTAKEN"
	putCtx, cancel := context.WithCancel(t.Context())
	defer cancel()
	dialer := &cancelOnDescribe{meta: "PUB $O." + bucket + ".M.", cancel: cancel}
	ctx, cancelOpen := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancelOpen()
	old, err := jetstream.Open(ctx, jetstream.Config{Bucket: bucket}, natstest.Connect(t, url, nats.SetCustomDialer(dialer)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.Close() })
	successor := open(t, url, jetstream.Config{Bucket: bucket})
	if _, err := old.Put(t.Context(), "o", strings.NewReader("first"), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}

	// The old engine's Put has read the key and waits for its content
	// while the successor writes the object.
	source := &gatedReader{open: make(chan struct{}), content: strings.NewReader("stale")}
	done := make(chan error, 1)
	go func() {
		_, err := old.Put(putCtx, "o", source, ports.PutObjectOptions{})
		done <- err
	}()
	if _, err := successor.Put(t.Context(), "o", strings.NewReader("new"), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	// Its caller gives up as its description leaves, and the stream
	// refuses that description: the successor's came first.
	dialer.armed.Store(true)
	close(source.open)
	var putErr error
	select {
	case putErr = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the Put did not return")
	}
	if putCtx.Err() == nil {
		t.Fatal("the caller's context did not end as the description left")
	}

	r, _, err := successor.Get(t.Context(), "o", ports.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	_ = r.Close()
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "new" {
		t.Fatalf("the object holds %q after a Put whose caller gave up (it returned %v), want the successor's %q", got, putErr, "new")
	}
	if putErr == nil {
		t.Fatal("a Put that stored nothing returned no error")
	}
}
