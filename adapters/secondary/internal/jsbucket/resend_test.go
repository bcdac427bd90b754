package jsbucket

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/abi-engine/engine/internal/natstest"
)

// lostAck stores a write's first attempt but reports its acknowledgement
// lost, then refuses the resend with 10158, as a replicated stream does
// while the first attempt under the same message id is still proposed.
// Neither can be made to happen on demand against a real broker.
type lostAck struct {
	jetstream.JetStream
	calls atomic.Int32
}

func (l *lostAck) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	switch l.calls.Add(1) {
	case 1:
		if _, err := l.JetStream.PublishMsg(ctx, m, opts...); err != nil {
			return nil, err
		}
		return nil, nats.ErrTimeout
	case 2:
		return nil, &jetstream.APIError{Code: 503, ErrorCode: 10158, Description: "duplicate message id is in process"}
	}
	return l.JetStream.PublishMsg(ctx, m, opts...)
}

// A resend that meets its first attempt still in flight waits and sends
// again; the stream then answers it as the duplicate of the write it
// stored, and the write is reported done, at that write's revision.
func TestAResendThatMeetsItsFirstAttemptInFlightIsWaitedOut(t *testing.T) {
	nc := natstest.Connect(t, natstest.StartServer(t).ClientURL())
	b, err := Open(t.Context(), nc, Config{Bucket: "RESEND"}, "test")
	if err != nil {
		t.Fatal(err)
	}
	faulty := &lostAck{JetStream: b.js}
	b.js = faulty
	rev, err := b.Put(t.Context(), "k", []byte("v"), 0, nil)
	if err != nil {
		t.Fatalf("Put whose first acknowledgement was lost: %v", err)
	}
	last, err := b.Last(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if !last.Live || string(last.Value) != "v" || last.Revision != rev {
		t.Fatalf("Put reported revision %d; the key holds %q at revision %d (live %v)", rev, last.Value, last.Revision, last.Live)
	}
	if n := faulty.calls.Load(); n != 3 {
		t.Fatalf("the write was sent %d times, want 3 (stored, refused in flight, answered as a duplicate)", n)
	}
}
