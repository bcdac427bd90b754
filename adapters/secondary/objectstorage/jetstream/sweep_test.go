package jetstream_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/objectstorage/jetstream"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// openSweeping opens a store whose sweeps, every 50 ms, take chunks no
// description names once they have found them unchanged for age.
func openSweeping(t *testing.T, url string, c jetstream.Config, age, stall time.Duration, now func() time.Time) *jetstream.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := jetstream.OpenSweeping(ctx, c, natstest.Connect(t, url), age, 50*time.Millisecond, stall, now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// readWhole reads the whole object key and checks it holds want.
func readWhole(t *testing.T, s *jetstream.Store, key string, want []byte) {
	t.Helper()
	r, _, err := s.Get(t.Context(), key, ports.GetObjectOptions{})
	if err != nil {
		t.Fatalf("Get %s: %v", key, err)
	}
	got, err := io.ReadAll(r)
	_ = r.Close()
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Get %s: %d bytes, %v; want %d bytes", key, len(got), err, len(want))
	}
}

// The chunks of a Put whose engine died before its description was sent
// are named by no description; the store's sweeps purge them once they
// have found them unchanged for long enough, and leave the chunks of the
// objects stored, however old. Before, nothing ever purged them: they stayed in
// the stream for good.
func TestTheChunksOfAPutCutShortByACrashAreSweptOnceOld(t *testing.T) {
	url := natstest.StartProcess(t, server)
	c := jetstream.Config{Bucket: "CRASHEDPUT"}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	kept := bytes.Repeat([]byte("kept "), 60000) // three chunks
	if _, err := open(t, url, c).Put(ctx, "kept", bytes.NewReader(kept), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}

	// The dying engine's Put has stored two chunks when its connection is
	// cut: it dies there, and no purge of its own reaches the server.
	nc := natstest.Connect(t, url)
	dying, err := jetstream.Open(ctx, c, nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dying.Close() })
	r := &stallingReader{
		first:   bytes.NewReader(bytes.Repeat([]byte("a"), 300<<10)),
		rest:    strings.NewReader("the end"),
		stalled: make(chan struct{}), resume: make(chan struct{}),
	}
	put := make(chan error, 1)
	go func() {
		_, err := dying.Put(ctx, "o", r, ports.PutObjectOptions{})
		put <- err
	}()
	select {
	case <-r.stalled:
	case <-ctx.Done():
		t.Fatal("the Put read no further than its first chunks")
	}
	nc.Close()
	close(r.resume)
	select {
	case err := <-put:
		if err == nil {
			t.Fatal("a Put whose connection was cut stored its object")
		}
	case <-ctx.Done():
		t.Fatal("the Put did not return")
	}
	if n := len(chunkSubjects(t, url, c.Bucket)); n != 2 {
		t.Fatalf("the stream holds the chunks of %d objects before the sweep, want 2 (the stored object's and the dead Put's)", n)
	}

	successor := openSweeping(t, url, c, 2*time.Second, time.Second, time.Now)
	waitChunkSubjects(t, url, c.Bucket, 1, time.Minute)
	readWhole(t, successor, "kept", kept)
}

// pacedReader gives a chunk of size bytes every pace until it has given
// for at least lasting.
type pacedReader struct {
	size          int
	pace, lasting time.Duration
	start         time.Time
	left          int
	given         int
}

func (p *pacedReader) Read(b []byte) (int, error) {
	if p.start.IsZero() {
		p.start = time.Now()
	}
	if p.left == 0 {
		if time.Since(p.start) > p.lasting {
			return 0, io.EOF
		}
		time.Sleep(p.pace)
		p.left = p.size
	}
	n := min(len(b), p.left)
	for i := range b[:n] {
		b[i] = byte(p.given + i)
	}
	p.given += n
	p.left -= n
	return n, nil
}

// A sweep on one engine never takes the chunks of a Put still writing
// them on another, however long ago its first chunk was stored: the sweep
// judges a Put's chunks by the newest.
func TestASweepLeavesTheChunksOfAPutStillUnderWayOnAnotherEngine(t *testing.T) {
	url := natstest.StartProcess(t, server)
	c := jetstream.Config{Bucket: "SWEPTUNDERWAY"}
	const age = 3 * time.Second
	openSweeping(t, url, c, age, time.Second, time.Now)
	writer := open(t, url, c)
	src := &pacedReader{size: 128 << 10, pace: 100 * time.Millisecond, lasting: 3 * age}
	info, err := writer.Put(t.Context(), "slow", src, ports.PutObjectOptions{})
	if err != nil {
		t.Fatalf("a Put that lasted %v beside a sweep of chunks %v old: %v", 3*age, age, err)
	}
	want := make([]byte, src.given)
	for i := range want {
		want[i] = byte(i % (128 << 10))
	}
	if info.Size != int64(len(want)) {
		t.Fatalf("the Put stored %d bytes, want %d", info.Size, len(want))
	}
	readWhole(t, writer, "slow", want)
}

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// onRest calls f when first is read to its end, before it gives rest.
type onRest struct {
	first, rest io.Reader
	f           func()
	once        sync.Once
}

func (r *onRest) Read(p []byte) (int, error) {
	if n, err := r.first.Read(p); n > 0 || err != io.EOF {
		return n, err
	}
	r.once.Do(r.f)
	return r.rest.Read(p)
}

// A Put whose chunks come further apart than the sweeps allow fails and
// purges its chunks: a sweep, which judges them by the newest, may have
// taken those before the gap as left by a crash, and a description naming
// them would be an object no Get reads.
func TestAPutWhoseChunksComeFurtherApartThanTheSweepsAllowFailsAndLeavesNoChunks(t *testing.T) {
	url := natstest.StartProcess(t, server)
	c := jetstream.Config{Bucket: "STALLEDPUT"}
	clock := &fakeClock{t: time.Now()}
	const stall = time.Minute
	s := openSweeping(t, url, c, time.Hour, stall, clock.now)
	for _, tc := range []struct {
		name string
		rest string
	}{
		{name: "BetweenTwoChunks", rest: strings.Repeat("b", 200<<10)},
		{name: "BeforeItsDescription", rest: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &onRest{
				first: bytes.NewReader(bytes.Repeat([]byte("a"), 128<<10)),
				rest:  strings.NewReader(tc.rest),
				f:     func() { clock.advance(stall + time.Second) },
			}
			_, err := s.Put(t.Context(), "o", r, ports.PutObjectOptions{})
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("a Put whose content stalled %v past the sweeps' bound: %v, want a deadline exceeded", stall+time.Second, err)
			}
			t.Logf("Put: %v", err)
			if _, err := s.Stat(t.Context(), "o"); !errors.Is(err, ports.ErrNotFound) {
				t.Fatalf("Stat after the failed Put: %v, want not found", err)
			}
			if left := chunkSubjects(t, url, c.Bucket); len(left) != 0 {
				t.Fatalf("the failed Put left chunks: %v", left)
			}
		})
	}
}
