package jetstream_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/secondary/document/jetstream"
	"github.com/abi-engine/engine/adapters/secondary/internal/jstest"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// scanStopper dials connections that hold their first direct get (the
// first batch of a scan, after its barrier is written) until release is
// closed.
type scanStopper struct {
	once    sync.Once
	held    chan struct{}
	release chan struct{}
}

func (p *scanStopper) Dial(network, address string) (net.Conn, error) {
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return scanStoppingConn{Conn: c, p: p}, nil
}

type scanStoppingConn struct {
	net.Conn
	p *scanStopper
}

func (c scanStoppingConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte("$JS.API.DIRECT.GET.")) {
		c.p.once.Do(func() {
			close(c.p.held)
			<-c.p.release
		})
	}
	return c.Conn.Write(b)
}

// A find that runs while its collection is dropped, by this engine or
// another, answers at once: the drop's purge removes the scan's barrier
// with the documents, and the scan writes it again rather than wait for a
// message that will never come. Before, the find waited for the barrier
// until its deadline and failed. Its answer is that the collection is not
// found: the drop ended before the scan read a document, so an empty page
// would say the collection was there and empty, which it never was.
func TestAFindDuringADropOfItsCollectionAnswersNotFound(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	c := jetstream.Config{Bucket: jstest.Bucket(t), Replicas: 1}
	p := &scanStopper{held: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(func() {
		select {
		case <-p.release:
		default:
			close(p.release)
		}
	})
	nc, err := nats.Connect(url, nats.SetCustomDialer(p))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	finder, err := jetstream.Open(t.Context(), c, nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = finder.Close() })
	dropper := open(t, url, c)
	if err := dropper.EnsureCollection(t.Context(), "c"); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := dropper.Put(t.Context(), "c", fmt.Sprint(i), map[string]any{"n": i}, ports.Cond{}); err != nil {
			t.Fatal(err)
		}
	}

	// The find's own deadline is long; the test wants its answer well
	// before it.
	const deadline, answerWithin = 60 * time.Second, 15 * time.Second
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	type result struct {
		docs []ports.Document
		err  error
	}
	done := make(chan result, 1)
	go func() {
		docs, _, err := finder.Find(ctx, "c", ports.Query{})
		done <- result{docs, err}
	}()
	select {
	case <-p.held:
	case <-time.After(30 * time.Second):
		t.Fatal("the find sent no batch within 30 s")
	}
	if err := dropper.DropCollection(t.Context(), "c"); err != nil {
		t.Fatal(err)
	}
	close(p.release)
	start := time.Now()
	select {
	case r := <-done:
		if !errors.Is(r.err, ports.ErrNotFound) {
			t.Fatalf("find during a drop of its collection = %d documents, %v after %v; want ErrNotFound",
				len(r.docs), r.err, time.Since(start).Round(time.Millisecond))
		}
	case <-time.After(answerWithin):
		t.Fatalf("find during a drop of its collection had not answered %v after the drop", answerWithin)
	}
}
