package jsbucket

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
	"github.com/nats-io/nats.go/jetstream"

	"github.com/abi-engine/engine/internal/natstest"
)

// holdingProxy passes one client's connection to a broker, and on demand
// holds back what the broker sends the client, in order, until released:
// a network that loses nothing but delivers late. It counts what the
// client sends.
type holdingProxy struct {
	ln     net.Listener
	mu     sync.Mutex
	hold   bool
	held   [][]byte
	client net.Conn
	sent   bytes.Buffer
}

func startHoldingProxy(t *testing.T, target string) *holdingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdingProxy{ln: ln}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			t.Cleanup(func() { _ = c.Close(); _ = s.Close() })
			p.mu.Lock()
			p.client = c
			p.mu.Unlock()
			go func() { // client to broker, counted
				buf := make([]byte, 32<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						p.mu.Lock()
						p.sent.Write(buf[:n])
						p.mu.Unlock()
						if _, werr := s.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						_ = s.Close()
						return
					}
				}
			}()
			go func() { // broker to client, held on demand
				buf := make([]byte, 32<<10)
				for {
					n, err := s.Read(buf)
					if n > 0 {
						p.mu.Lock()
						if p.hold {
							p.held = append(p.held, bytes.Clone(buf[:n]))
						} else if _, werr := c.Write(buf[:n]); werr != nil {
							p.mu.Unlock()
							return
						}
						p.mu.Unlock()
					}
					if err != nil {
						if err != io.EOF {
							_ = c.Close()
						}
						return
					}
				}
			}()
		}
	}()
	return p
}

func (p *holdingProxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *holdingProxy) holdReplies() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold = true
}

// release delivers what was held, in order, and stops holding.
func (p *holdingProxy) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.held {
		_, _ = p.client.Write(b)
	}
	p.held, p.hold = nil, false
}

// count is how many times the client sent s.
func (p *holdingProxy) count(s string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Count(p.sent.String(), s)
}

type lateAckResult struct {
	rev uint64
	err error
}

// storedThenOverwritten runs write, which writes "ours" to the key k, with
// the proxy holding the replies. Once the write is stored, other writes
// the key over it; once the writer's attempt timed out and it sent the
// write again (counted by sent, a text each attempt carries), the held
// replies go, the first too late. It returns what write answered, and the
// revision the write was stored at.
func storedThenOverwritten(t *testing.T, proxy *holdingProxy, other jetstream.KeyValue, sent string, write func() (uint64, error)) (lateAckResult, uint64) {
	t.Helper()
	sentBefore := proxy.count(sent)
	proxy.holdReplies()
	done := make(chan lateAckResult, 1)
	go func() {
		rev, err := write()
		done <- lateAckResult{rev, err}
	}()
	deadline := time.Now().Add(30 * time.Second)
	var ours uint64
	for ours == 0 {
		if e, err := other.Get(t.Context(), "k"); err == nil && string(e.Value()) == "ours" {
			ours = e.Revision()
		} else if time.Now().After(deadline) {
			t.Fatal("our write was never stored")
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if _, err := other.Put(t.Context(), "k", []byte("theirs")); err != nil {
		t.Fatal(err)
	}
	for proxy.count(sent) < sentBefore+2 {
		if time.Now().After(deadline) {
			t.Fatal("the write was never sent again")
		}
		time.Sleep(10 * time.Millisecond)
	}
	proxy.release()
	return <-done, ours
}

// A conditional write whose acknowledgement comes too late is sent again
// under its message id; a single-replica stream checks the revision before
// the message id, and refuses the resend, since the key's last revision is
// no longer the one expected. If another write came after ours meanwhile,
// the key's last message is not ours either. The write was stored all the
// same: Put reports it done, at its revision. Before, Put reported a
// conflict, and the caller, told its write never happened, would make it
// again over a value that had moved on.
func TestAConditionalWriteStoredBeforeAnotherIsDoneThoughItsAcknowledgementCameTooLate(t *testing.T) {
	s := natstest.StartServer(t)
	proxy := startHoldingProxy(t, s.Addr().String())
	nc := natstest.Connect(t, proxy.url())
	b, err := Open(t.Context(), nc, Config{Bucket: "LATE"}, "test")
	if err != nil {
		t.Fatal(err)
	}
	first, err := b.Put(t.Context(), "k", []byte("first"), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(natstest.Connect(t, s.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	other, err := js.KeyValue(t.Context(), "LATE")
	if err != nil {
		t.Fatal(err)
	}

	got, ours := storedThenOverwritten(t, proxy, other, "$KV.LATE.k ", func() (uint64, error) {
		return b.Put(t.Context(), "k", []byte("ours"), 0, &first)
	})
	if got.err != nil || got.rev != ours {
		t.Fatalf("Put of a write stored at revision %d returned revision %d, %v; want it done at %d", ours, got.rev, got.err, ours)
	}
}

// lostRequest loses a write's first attempt before the broker sees it, and
// lets another writer write the key meanwhile.
type lostRequest struct {
	jetstream.JetStream
	calls    int
	meantime func()
}

func (l *lostRequest) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	l.calls++
	if l.calls == 1 {
		l.meantime()
		return nil, nats.ErrTimeout
	}
	return l.JetStream.PublishMsg(ctx, m, opts...)
}

// A conditional write that was never stored, and whose resend is refused
// because another write came first, is a conflict; asking the stream
// whether it was stored stores nothing.
func TestAConditionalWriteNeverStoredWhoseResendIsRefusedIsAConflict(t *testing.T) {
	nc := natstest.Connect(t, natstest.StartServer(t).ClientURL())
	b, err := Open(t.Context(), nc, Config{Bucket: "NEVER"}, "test")
	if err != nil {
		t.Fatal(err)
	}
	first, err := b.Put(t.Context(), "k", []byte("first"), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	broker := b.js
	b.js = &lostRequest{JetStream: broker, meantime: func() {
		if _, err := broker.Publish(t.Context(), b.Subject("k"), []byte("theirs")); err != nil {
			t.Error(err)
		}
	}}
	if _, err := b.Put(t.Context(), "k", []byte("ours"), 0, &first); !errors.Is(err, ErrConflict) {
		t.Fatalf("Put of a write never stored, over a key another wrote: %v, want a conflict", err)
	}
	last, err := b.Last(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if string(last.Value) != "theirs" || last.Revision != first+1 {
		t.Fatalf("the key holds %q at revision %d; want the other writer's at %d, and nothing of ours", last.Value, last.Revision, first+1)
	}
}
