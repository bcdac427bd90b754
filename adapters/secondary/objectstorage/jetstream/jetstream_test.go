package jetstream_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/abi-engine/engine/adapters/secondary/internal/jstest"
	"github.com/abi-engine/engine/adapters/secondary/objectstorage/jetstream"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// server is the nats-server binary. The brokers run as processes of their
// own: the contract measures the heap while 64 MiB stream, and a broker in
// the test's process would count its caches as the adapter's.
var server string

func TestMain(m *testing.M) { os.Exit(natstest.MainWithServer(m, &server)) }

// open opens a store on a connection of its own, closed when the test ends.
func open(t *testing.T, url string, c jetstream.Config) *jetstream.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := jetstream.Open(ctx, c, natstest.Connect(t, url))
	if err != nil {
		t.Fatalf("Open bucket %s: %v", c.Bucket, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestObjectStorageContract(t *testing.T) {
	suite := func(t *testing.T, url string, replicas int) {
		contracttests.RunObjectStorage(t, contracttests.HarnessFunc[ports.ObjectStorage](func(t *testing.T) func(*testing.T) ports.ObjectStorage {
			c := jetstream.Config{Bucket: jstest.Bucket(t), Replicas: replicas}
			return func(t *testing.T) ports.ObjectStorage { return open(t, url, c) }
		}), contracttests.ObjectStorageCapabilities{ConditionalPut: true, PathLikeKeys: true, NestedKeys: true, Linearizable: true})
	}
	t.Run("jetstream", func(t *testing.T) { suite(t, natstest.StartProcess(t, server), 1) })
	t.Run("jetstream-r3", func(t *testing.T) { suite(t, natstest.StartClusterProcesses(t, server), 3) })
}

// TestObjectStorageContractUnderATerm runs the contract again with every
// call under one term's fencing token, as the engine's calls are, so every
// case, the races of two handles on one bucket included, goes through the
// fenced writes.
func TestObjectStorageContractUnderATerm(t *testing.T) {
	suite := func(t *testing.T, url string, replicas int) {
		contracttests.RunObjectStorage(t, contracttests.HarnessFunc[ports.ObjectStorage](func(t *testing.T) func(*testing.T) ports.ObjectStorage {
			c := jetstream.Config{Bucket: jstest.Bucket(t), Replicas: replicas}
			return func(t *testing.T) ports.ObjectStorage { return underTerm{open(t, url, c)} }
		}), contracttests.ObjectStorageCapabilities{ConditionalPut: true, PathLikeKeys: true, NestedKeys: true, Linearizable: true})
	}
	t.Run("jetstream", func(t *testing.T) { suite(t, natstest.StartProcess(t, server), 1) })
	t.Run("jetstream-r3", func(t *testing.T) { suite(t, natstest.StartClusterProcesses(t, server), 3) })
}

// underTerm is a store whose every call carries the fencing token 11.
type underTerm struct{ s *jetstream.Store }

func term(ctx context.Context) context.Context { return ports.WithFencingToken(ctx, 11) }

func (u underTerm) Put(ctx context.Context, key string, r io.Reader, opts ports.PutObjectOptions) (ports.ObjectInfo, error) {
	return u.s.Put(term(ctx), key, r, opts)
}

func (u underTerm) Get(ctx context.Context, key string, opts ports.GetObjectOptions) (io.ReadCloser, ports.ObjectInfo, error) {
	return u.s.Get(term(ctx), key, opts)
}

func (u underTerm) Stat(ctx context.Context, key string) (ports.ObjectInfo, error) {
	return u.s.Stat(term(ctx), key)
}

func (u underTerm) Delete(ctx context.Context, key string) error { return u.s.Delete(term(ctx), key) }

func (u underTerm) DeleteIfMatch(ctx context.Context, key, etag string) (bool, error) {
	return u.s.DeleteIfMatch(term(ctx), key, etag)
}

func (u underTerm) List(ctx context.Context, prefix string, limit int, cursor string) ([]ports.ObjectInfo, string, error) {
	return u.s.List(term(ctx), prefix, limit, cursor)
}

// Two Puts at once interleave their chunks in the stream: a range read
// still finds its first chunk, at every offset.
func TestRangeReadsOfInterleavedObjects(t *testing.T) {
	s := open(t, natstest.StartProcess(t, server), jetstream.Config{Bucket: "INTERLEAVED"})
	const size = 2<<20 + 1234
	content := func(key string) []byte {
		b := make([]byte, size)
		for i := range b {
			b[i] = key[0] + byte(i/131)
		}
		return b
	}
	var wg sync.WaitGroup
	for _, key := range []string{"a", "b"} {
		wg.Go(func() {
			if _, err := s.Put(t.Context(), key, iotest.OneByteReader(bytes.NewReader(content(key))), ports.PutObjectOptions{}); err != nil {
				t.Errorf("Put %s: %v", key, err)
			}
		})
	}
	wg.Wait()
	for _, key := range []string{"a", "b"} {
		want := content(key)
		for _, off := range []int64{0, 1, 128<<10 - 1, 128 << 10, 5*128<<10 + 7, size - 1000, size - 1} {
			r, _, err := s.Get(t.Context(), key, ports.GetObjectOptions{Offset: off, Length: 100})
			if err != nil {
				t.Fatalf("Get %s at %d: %v", key, off, err)
			}
			got, err := io.ReadAll(r)
			_ = r.Close()
			end := min(off+100, size)
			if err != nil || !bytes.Equal(got, want[off:end]) {
				t.Fatalf("Get %s at %d: %d bytes, %v; want bytes %d to %d", key, off, len(got), err, off, end)
			}
		}
	}
}

// A Get that races a Put over the same object reads the object before or
// after it, never "not found": the object never went. Before, a Get that
// read the description just before a Put replaced it found the chunks
// purged and answered ErrNotFound.
func TestAGetDuringAnOverwriteFindsTheObject(t *testing.T) {
	s := open(t, natstest.StartProcess(t, server), jetstream.Config{Bucket: "OVERWRITTEN"})
	if _, err := s.Put(t.Context(), "o", bytes.NewReader([]byte("first")), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	const rounds = 150
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		missing int
	)
	for w := range 3 {
		wg.Go(func() {
			for i := range rounds {
				if _, err := s.Put(t.Context(), "o", bytes.NewReader(fmt.Appendf(nil, "w%d.%d", w, i)), ports.PutObjectOptions{}); err != nil {
					t.Errorf("Put: %v", err)
					return
				}
			}
		})
		wg.Go(func() {
			for range rounds {
				r, _, err := s.Get(t.Context(), "o", ports.GetObjectOptions{})
				if err == nil {
					_, err = io.ReadAll(r)
					_ = r.Close()
				}
				switch {
				case errors.Is(err, ports.ErrNotFound):
					mu.Lock()
					missing++
					mu.Unlock()
				case err != nil:
					t.Errorf("Get: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if missing > 0 {
		t.Fatalf("%d of %d Gets during overwrites answered not found for an object that never went", missing, 3*rounds)
	}
}

// Plain Puts racing on one key each purge the chunks of the object they
// replaced, so once they are done only the last object's chunks are left
// in the stream: none is kept for good by a Put that another overtook.
func TestRacingPutsLeaveOnlyTheLiveObjectsChunks(t *testing.T) {
	url := natstest.StartProcess(t, server)
	const bucket = "RACED"
	s := open(t, url, jetstream.Config{Bucket: bucket})
	const writers, rounds = 4, 25
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range rounds {
				if _, err := s.Put(t.Context(), "o", bytes.NewReader(fmt.Appendf(nil, "w%d.%d", w, i)), ports.PutObjectOptions{}); err != nil {
					t.Errorf("Put: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	st, err := natsjs.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	stream, err := st.Stream(ctx, "OBJ_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx, natsjs.WithSubjectFilter("$O."+bucket+".C.>"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(info.State.Subjects); n != 1 {
		t.Fatalf("after %d racing Puts of one key, the chunks of %d objects are in the stream, want only the live one's",
			writers*rounds, n)
	}
}
