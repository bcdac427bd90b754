package jetstream_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/abi-engine/engine/adapters/secondary/objectstorage/jetstream"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// stallingReader gives first, then, on the next read, closes stalled and
// waits for resume before it gives rest and ends.
type stallingReader struct {
	first, rest    io.Reader
	stalled        chan struct{}
	resume         chan struct{}
	stall, restart sync.Once
}

func (r *stallingReader) Read(p []byte) (int, error) {
	if n, err := r.first.Read(p); n > 0 || err != io.EOF {
		return n, err
	}
	r.stall.Do(func() {
		close(r.stalled)
		<-r.resume
	})
	return r.rest.Read(p)
}

// chunkSubjects lists the subjects of the bucket's stream that hold chunks.
func chunkSubjects(t *testing.T, url, bucket string) map[string]uint64 {
	t.Helper()
	info, err := objectStream(t, natstest.Connect(t, url), bucket).Info(t.Context(), natsjs.WithSubjectFilter("$O."+bucket+".C.>"))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects
}

// objectStream is the stream of the object bucket, read over nc.
func objectStream(t *testing.T, nc *nats.Conn, bucket string) natsjs.Stream {
	t.Helper()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(t.Context(), "OBJ_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

// awaitChunkedObjects waits, a minute at most, for the chunks in the
// bucket's stream, read over nc, to be those of want objects, and fails
// the test, saying why with whose, if they are not. A purge gives up after
// purgeTimeout without a word, and one that gave up on a loaded machine
// may still be applied after its call returned, so the count is read
// again until it comes down to want. None left where want are live fails
// at once.
func awaitChunkedObjects(t *testing.T, nc *nats.Conn, bucket string, want int, whose string) {
	t.Helper()
	stream := objectStream(t, nc, bucket)
	deadline := time.Now().Add(time.Minute)
	for {
		info, err := stream.Info(t.Context(), natsjs.WithSubjectFilter("$O."+bucket+".C.>"))
		n := -1
		if err == nil {
			n = len(info.State.Subjects)
		}
		if n == want {
			return
		}
		if n == 0 {
			t.Fatalf("no chunks are in the stream, want those of %d objects", want)
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the refused Put, the chunks of %d objects are in the stream (%v), want %d: %s", n, err, want, whose)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A Put whose caller gives up while the store closes, its first chunks
// stored and no description sent, leaves none of its chunks in the stream:
// the store's Close waits for the Put to purge them before it closes the
// connection. Before, Close closed the connection under the Put, whose
// purge then failed, and the chunks, which no description names, stayed
// in the stream for good.
func TestAPutCutShortByCloseLeavesNoChunks(t *testing.T) {
	url := natstest.StartProcess(t, server)
	c := jetstream.Config{Bucket: "CLOSEDUNDERPUT"}
	ctx, cancelOpen := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancelOpen()
	connClosed := make(chan struct{})
	nc := natstest.Connect(t, url, nats.ClosedHandler(func(*nats.Conn) { close(connClosed) }))
	s, err := jetstream.Open(ctx, c, nc)
	if err != nil {
		t.Fatal(err)
	}
	r := &stallingReader{
		first:   bytes.NewReader(bytes.Repeat([]byte("a"), 300<<10)), // two whole chunks and part of a third
		rest:    strings.NewReader("the end"),
		stalled: make(chan struct{}), resume: make(chan struct{}),
	}
	t.Cleanup(func() {
		select {
		case <-r.resume:
		default:
			close(r.resume)
		}
	})
	putCtx, cancel := context.WithCancel(t.Context())
	defer cancel()
	put := make(chan error, 1)
	go func() {
		_, err := s.Put(putCtx, "o", r, ports.PutObjectOptions{})
		put <- err
	}()
	select {
	case <-r.stalled: // two chunks are stored: each was acknowledged before the next read
	case <-time.After(30 * time.Second):
		t.Fatal("the Put read no further than its first chunks within 30 s")
	}
	if n := len(chunkSubjects(t, url, c.Bucket)); n != 1 {
		t.Fatalf("the Put under way has chunks under %d subjects, want 1", n)
	}

	// The engine stops: the caller gives up and the store closes.
	cancel()
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	// The reader goes on once the connection is closed under the Put, or,
	// as Close waits for the Put, after a while.
	select {
	case <-connClosed:
	case <-time.After(2 * time.Second):
	}
	close(r.resume)
	select {
	case err := <-put:
		if err == nil {
			t.Fatal("a Put whose caller gave up before its end stored the object")
		}
		t.Logf("Put: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("Put did not return")
	}
	select {
	case <-closed:
	case <-time.After(60 * time.Second):
		t.Fatal("Close did not return")
	}
	if left := chunkSubjects(t, url, c.Bucket); len(left) != 0 {
		t.Fatalf("the chunks of the Put cut short stay in the stream, named by no description: %v", left)
	}
}

// purgeCutter dials connections that close instead of sending a purge of
// the stream: an engine cut off from its broker between a write and the
// purge after it.
type purgeCutter struct{ purge string }

func (p purgeCutter) Dial(network, address string) (net.Conn, error) {
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return purgeCuttingConn{Conn: c, purge: p.purge}, nil
}

type purgeCuttingConn struct {
	net.Conn
	purge string
}

func (c purgeCuttingConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte(c.purge)) {
		c.Conn.Close()
		return 0, errors.New("cut off before the purge left")
	}
	return c.Conn.Write(b)
}

// A Put over an object whose Delete was cut off before it purged the
// chunks takes those chunks with it, as it takes those of a live object it
// replaces: the deleted description still names them, and nothing else
// ever would. Before, the Put purged only the chunks of a live object, and
// the deleted object's stayed in the stream for good.
func TestAPutOverADeletedObjectPurgesTheChunksItsDeleteLeft(t *testing.T) {
	url := natstest.StartProcess(t, server)
	c := jetstream.Config{Bucket: "DELETEDUNPURGED"}
	s := open(t, url, c)
	if _, err := s.Put(t.Context(), "o", bytes.NewReader(bytes.Repeat([]byte("x"), 300<<10)), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	nc := natstest.Connect(t, url, nats.SetCustomDialer(purgeCutter{purge: "$JS.API.STREAM.PURGE.OBJ_" + c.Bucket}), nats.NoReconnect())
	cut, err := jetstream.Open(ctx, c, nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cut.Close() })
	t.Logf("Delete cut off before its purge: %v", cut.Delete(ctx, "o"))
	if _, err := s.Stat(ctx, "o"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Stat after the Delete: %v, want not found", err)
	}
	if n := len(chunkSubjects(t, url, c.Bucket)); n != 1 {
		t.Fatalf("the deleted object's chunks are under %d subjects before the Put, want 1 (the test's cut did not hold)", n)
	}

	if _, err := s.Put(ctx, "o", strings.NewReader("new"), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if left := chunkSubjects(t, url, c.Bucket); len(left) != 1 {
		t.Fatalf("after a Put over the deleted object the stream holds chunks under %d subjects, want the Put's 1: %v", len(left), left)
	}
}
