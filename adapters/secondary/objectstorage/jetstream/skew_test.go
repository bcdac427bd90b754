package jetstream_test

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/secondary/objectstorage/jetstream"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// aheadDialer dials connections that see the server's clock ahead by
// skew: the time a stream's info gives ("ts") is moved on, as when the
// stream's leader is now a server whose clock runs ahead of the one that
// stamped the messages. It counts the times it moved.
type aheadDialer struct {
	skew  time.Duration
	mu    sync.Mutex
	moved int
	more  chan struct{} // closed and replaced at every move
}

func (d *aheadDialer) Dial(network, address string) (net.Conn, error) {
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return &aheadConn{Conn: c, d: d}, nil
}

// count is the moves so far, and a channel closed at the next.
func (d *aheadDialer) count() (int, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.moved, d.more
}

func (d *aheadDialer) moveOn() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.moved++
	close(d.more)
	d.more = make(chan struct{})
}

// aheadConn rewrites `"ts":"2006-01-02T15:04:05` in what it reads to a
// time skew later, of the same length; a match cut by the end of a read
// waits for the bytes that complete it.
type aheadConn struct {
	net.Conn
	d       *aheadDialer
	pending []byte // read, not yet handed out
	held    []byte // read, possibly the start of a match
}

const tsField = `"ts":"`

const tsLayout = "2006-01-02T15:04:05"

func (c *aheadConn) Read(p []byte) (int, error) {
	for len(c.pending) == 0 {
		buf := make([]byte, 64<<10)
		n, err := c.Conn.Read(buf)
		data := append(c.held, buf[:n]...)
		c.held = nil
		out := make([]byte, 0, len(data))
		for {
			i := bytes.Index(data, []byte(tsField))
			if i < 0 {
				// Keep a tail that may begin the field.
				keep := 0
				for k := min(len(tsField)-1, len(data)); k > 0; k-- {
					if bytes.HasPrefix([]byte(tsField), data[len(data)-k:]) {
						keep = k
						break
					}
				}
				out = append(out, data[:len(data)-keep]...)
				c.held = append(c.held, data[len(data)-keep:]...)
				break
			}
			end := i + len(tsField) + len(tsLayout)
			if end > len(data) {
				out = append(out, data[:i]...)
				c.held = append(c.held, data[i:]...)
				break
			}
			out = append(out, data[:i+len(tsField)]...)
			stamp := data[i+len(tsField) : end]
			if t, perr := time.Parse(tsLayout, string(stamp)); perr == nil {
				out = append(out, t.Add(c.d.skew).Format(tsLayout)...)
				c.d.moveOn()
			} else {
				out = append(out, stamp...)
			}
			data = data[end:]
		}
		c.pending = out
		if err != nil {
			if len(c.pending) == 0 {
				return 0, err
			}
			break
		}
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// A sweep judges the chunks of a Put by the time it has itself seen them
// stand unchanged, on its own clock. It judged them by the time of the
// stream's leader against the time the stored messages carry, which the
// leader that stored them stamped: after the leader moved to a server
// whose clock runs two hours ahead, it took the chunks of a Put still
// under way as an hour old, purged them, and the Put then stored an
// object whose content was gone.
func TestASweepOnALeaderWhoseClockRunsAheadLeavesTheChunksOfAPutUnderWay(t *testing.T) {
	url := natstest.StartProcess(t, server)
	c := jetstream.Config{Bucket: "SWEPTAHEAD"}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	writer := open(t, url, c)
	r := &stallingReader{
		first:   bytes.NewReader(bytes.Repeat([]byte("a"), 300<<10)),
		rest:    strings.NewReader("the end"),
		stalled: make(chan struct{}), resume: make(chan struct{}),
	}
	var resume sync.Once
	t.Cleanup(func() { resume.Do(func() { close(r.resume) }) })
	put := make(chan error, 1)
	go func() {
		_, err := writer.Put(ctx, "o", r, ports.PutObjectOptions{})
		put <- err
	}()
	select {
	case <-r.stalled:
	case <-ctx.Done():
		t.Fatal("the Put read no further than its first chunks")
	}

	d := &aheadDialer{skew: 2 * time.Hour, more: make(chan struct{})}
	nc := natstest.Connect(t, url, nats.SetCustomDialer(d))
	sweeper, err := jetstream.OpenSweeping(ctx, c, nc, time.Hour, 20*time.Millisecond, 15*time.Minute, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sweeper.Close() })
	// Every sweep lists the bucket's subjects by the stream's info, which
	// carries the leader's time: six lists after Open are two whole sweeps
	// at least.
	opened, _ := d.count()
	for {
		n, more := d.count()
		if n >= opened+6 {
			break
		}
		select {
		case <-more:
		case <-ctx.Done():
			t.Fatalf("the sweeps listed the bucket %d times in two minutes", n-opened)
		}
	}
	if n := len(chunkSubjects(t, url, c.Bucket)); n != 1 {
		t.Fatalf("the stream holds the chunks of %d objects while the Put is under way, want 1: the sweep took its chunks", n)
	}
	resume.Do(func() { close(r.resume) })
	select {
	case err := <-put:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("the Put did not return")
	}
	readWhole(t, writer, "o", append(bytes.Repeat([]byte("a"), 300<<10), "the end"...))
}
