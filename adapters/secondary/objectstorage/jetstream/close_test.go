package jetstream_test

import (
	"bytes"
	"context"
	"io"
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
	js, err := natsjs.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(t.Context(), "OBJ_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(t.Context(), natsjs.WithSubjectFilter("$O."+bucket+".C.>"))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects
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
