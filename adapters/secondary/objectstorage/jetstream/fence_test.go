package jetstream_test

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/abi-engine/engine/adapters/secondary/objectstorage/jetstream"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// Two handles on one bucket stand for an engine paused across a takeover
// and its successor. Once the successor has written, the paused engine's
// Put and Delete, under its older term, are refused with ErrFenced: the
// object stays as the successor left it, and the refused Put leaves no
// chunks. Before, both landed over the successor's object.
func TestAnOlderTermsPutAndDeleteAfterANewerTermWroteAreRefused(t *testing.T) {
	t.Run("OneServer", func(t *testing.T) { olderTermRefused(t, natstest.StartProcess(t, server), 1) })
	t.Run("Cluster", func(t *testing.T) { olderTermRefused(t, natstest.StartClusterProcesses(t, server), 3) })
}

func olderTermRefused(t *testing.T, url string, replicas int) {
	const bucket = "FENCED"
	c := jetstream.Config{Bucket: bucket, Replicas: replicas}
	paused, successor := open(t, url, c), open(t, url, c)
	older := ports.WithFencingToken(t.Context(), 5)
	newer := ports.WithFencingToken(t.Context(), 6)
	// More than one chunk, so a refused Put has chunks to leave behind.
	late := bytes.Repeat([]byte("late"), 100<<10)

	if _, err := paused.Put(older, "o", bytes.NewReader([]byte("before the takeover")), ports.PutObjectOptions{}); err != nil {
		t.Fatalf("Put of the older term before the takeover: %v", err)
	}
	want, err := successor.Put(newer, "o", bytes.NewReader([]byte("the successor's")), ports.PutObjectOptions{})
	if err != nil {
		t.Fatalf("Put of the newer term: %v", err)
	}
	if _, err := paused.Put(older, "o", bytes.NewReader(late), ports.PutObjectOptions{}); !errors.Is(err, ports.ErrFenced) {
		t.Fatalf("Put of the older term after the newer term's: %v, want ErrFenced", err)
	}
	wantObject(t, successor, "after the older term's Put", want, "the successor's")
	if err := paused.Delete(older, "o"); !errors.Is(err, ports.ErrFenced) {
		t.Fatalf("Delete of the older term after the newer term's Put: %v, want ErrFenced", err)
	}
	wantObject(t, successor, "after the older term's Delete", want, "the successor's")

	js, err := natsjs.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(t.Context(), "OBJ_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	// A purge gives up after purgeTimeout without a word, and one that gave
	// up on a loaded machine may still be applied after the call returned:
	// the count is read until it comes down to the live object's, or a
	// minute has passed, and only then are left chunks the refused Put's.
	deadline := time.Now().Add(time.Minute)
	for {
		info, err := stream.Info(t.Context(), natsjs.WithSubjectFilter("$O."+bucket+".C.>"))
		n := -1
		if err == nil {
			n = len(info.State.Subjects)
		}
		if n == 1 {
			return
		}
		if n == 0 {
			t.Fatal("no chunks are in the stream, want the live object's")
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the refused Put, the chunks of %d objects are in the stream (%v), want only the live one's: the refused Put left its own", n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// wantObject fails the test unless key "o" of s is the object want with
// the content content.
func wantObject(t *testing.T, s *jetstream.Store, when string, want ports.ObjectInfo, content string) {
	t.Helper()
	r, got, err := s.Get(t.Context(), "o", ports.GetObjectOptions{})
	if err != nil {
		t.Fatalf("Get %s: %v", when, err)
	}
	b, err := io.ReadAll(r)
	_ = r.Close()
	if err != nil || string(b) != content || got.ETag != want.ETag {
		t.Fatalf("%s the object holds %q (ETag %s, %v); want the newer term's %q (ETag %s)", when, b, got.ETag, err, content, want.ETag)
	}
}

// Another client that writes the object store's config back through
// nats.go (UpdateObjectStore) leaves its stream with only the chunks' and
// the descriptions' subjects, and without atomic batches. A store that was
// already open then raises the fence of its next term all the same, and
// writes: before, the fence's records had no stream to go to, and every
// write of the new term failed as not done until the store opened again.
func TestANewTermWritesThoughAnotherClientRewroteTheObjectStoresConfig(t *testing.T) {
	url := natstest.StartProcess(t, server)
	const bucket = "REWRITTEN"
	s := open(t, url, jetstream.Config{Bucket: bucket, Replicas: 1})
	if _, err := s.Put(ports.WithFencingToken(t.Context(), 5), "o", bytes.NewReader([]byte("first term's")), ports.PutObjectOptions{}); err != nil {
		t.Fatalf("Put of the first term: %v", err)
	}
	js, err := natsjs.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.UpdateObjectStore(t.Context(), natsjs.ObjectStoreConfig{Bucket: bucket, Replicas: 1}); err != nil {
		t.Fatalf("another client's UpdateObjectStore: %v", err)
	}
	want, err := s.Put(ports.WithFencingToken(t.Context(), 6), "o", bytes.NewReader([]byte("next term's")), ports.PutObjectOptions{})
	if err != nil {
		t.Fatalf("Put of the next term after another client rewrote the stream's config: %v", err)
	}
	wantObject(t, s, "after the next term's Put", want, "next term's")
	if _, err := s.Put(ports.WithFencingToken(t.Context(), 5), "o", bytes.NewReader([]byte("late")), ports.PutObjectOptions{}); !errors.Is(err, ports.ErrFenced) {
		t.Fatalf("Put of the first term after the next term's: %v, want ErrFenced", err)
	}
	wantObject(t, s, "after the first term's late Put", want, "next term's")
}
