package jsbucket

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// A write that no stream took, each sending answered with no responders
// (the bucket's stream is gone), stored nothing: it fails as not done, so
// the caller may send it again. Before, it failed as an error of no kind,
// a 500, "may or may not have happened".
func TestAWriteNoStreamTookIsNotDone(t *testing.T) {
	s := natstest.StartServer(t)
	nc := natstest.Connect(t, s.ClientURL())
	b, err := Open(t.Context(), nc, Config{Bucket: "NOSTREAM"}, "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.js.DeleteStream(t.Context(), "KV_NOSTREAM"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	_, err = b.Put(ctx, "k", []byte("v"), 0, nil)
	if !errors.Is(err, ports.ErrNotDone) {
		t.Fatalf("Put that no stream took: %v, want it not done", err)
	}
}

// A write a sealed stream refused stored nothing, but no later sending
// can pass that refusal: it is not called not done, which would have its
// caller send it again until its deadline, for nothing. It fails naming
// the refusal, and the key holds nothing.
func TestAWriteASealedStreamRefusedIsNotCalledNotDone(t *testing.T) {
	nc := natstest.Connect(t, natstest.StartServer(t).ClientURL())
	b, err := Open(t.Context(), nc, Config{Bucket: "SEALED"}, "test")
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.stream.CachedInfo().Config
	cfg.Sealed = true
	if _, err := b.js.UpdateStream(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	_, err = b.Put(t.Context(), "k", []byte("v"), 0, nil)
	if err == nil || errors.Is(err, ports.ErrNotDone) || !isAPICode(err, 10109) {
		t.Fatalf("Put to a sealed stream: %v, want it failed naming the refusal, not as not done", err)
	}
	last, err := b.Last(t.Context(), "k")
	if err != nil || last.Revision != 0 {
		t.Fatalf("the key holds revision %d (%v), want nothing", last.Revision, err)
	}
}

// storedThenGone stores a write's first attempt and reports its
// acknowledgement lost, then answers every resend with no responders, as
// when the stream's leader goes right after it stored the write. A lost
// reply cannot be made to happen on demand against a real broker.
type storedThenGone struct {
	jetstream.JetStream
	calls atomic.Int32
}

func (s *storedThenGone) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if s.calls.Add(1) == 1 {
		if _, err := s.JetStream.PublishMsg(ctx, m, opts...); err != nil {
			return nil, err
		}
		return nil, nats.ErrTimeout
	}
	return nil, jetstream.ErrNoStreamResponse
}

// A write whose first sending was stored, its acknowledgement lost, is
// never not done, whatever its resends meet: a caller that sent it again
// would write it twice.
func TestAWriteWhoseAcknowledgementWasLostIsNeverNotDone(t *testing.T) {
	nc := natstest.Connect(t, natstest.StartServer(t).ClientURL())
	b, err := Open(t.Context(), nc, Config{Bucket: "LOSTACK"}, "test")
	if err != nil {
		t.Fatal(err)
	}
	faulty := &storedThenGone{JetStream: b.js}
	b.js = faulty
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	_, err = b.Put(ctx, "k", []byte("v"), 0, nil)
	if err == nil || errors.Is(err, ports.ErrNotDone) {
		t.Fatalf("Put whose first sending was stored, every resend finding no stream: %v, want an unknown outcome", err)
	}
	if n := faulty.calls.Load(); n < 2 {
		t.Fatalf("the write was sent %d times, want it sent again", n)
	}
	last, err := b.Last(t.Context(), "k")
	if err != nil || string(last.Value) != "v" {
		t.Fatalf("the key holds %q (%v), want the write stored", last.Value, err)
	}
}

// storedThenUnavailable stores a write's first attempt and reports its
// acknowledgement lost, then answers every resend as the stream being
// temporarily unavailable (10008), as while its leader is elected right
// after it stored the write. Neither can be made to happen on demand
// against a real broker.
type storedThenUnavailable struct {
	jetstream.JetStream
	calls atomic.Int32
}

func (s *storedThenUnavailable) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if s.calls.Add(1) == 1 {
		if _, err := s.JetStream.PublishMsg(ctx, m, opts...); err != nil {
			return nil, err
		}
		return nil, nats.ErrTimeout
	}
	return nil, &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}
}

// A write whose first sending was stored, its acknowledgement lost, and
// whose resends the stream answered as unavailable, is of unknown outcome:
// the error carries none of the stream's answers, which read as a refusal
// that stored nothing. Before, it wrapped the last one (10008), and an
// object Put took it so and purged the chunks of a description that was
// stored, leaving an object no Get could read.
func TestAWriteStoredBeforeItsResendsMetAnUnavailableStreamCarriesNoRefusal(t *testing.T) {
	nc := natstest.Connect(t, natstest.StartServer(t).ClientURL())
	b, err := Open(t.Context(), nc, Config{Bucket: "UNAVAILABLE"}, "test")
	if err != nil {
		t.Fatal(err)
	}
	faulty := &storedThenUnavailable{JetStream: b.js}
	b.js = faulty
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	_, err = b.Put(ctx, "k", []byte("v"), 0, nil)
	if err == nil || errors.Is(err, ports.ErrNotDone) || errors.Is(err, ErrConflict) || errors.As(err, new(*jetstream.APIError)) {
		t.Fatalf("Put whose first sending was stored, every resend met an unavailable stream: %v, want an unknown outcome carrying no refusal", err)
	}
	if n := faulty.calls.Load(); n < 2 {
		t.Fatalf("the write was sent %d times, want it sent again", n)
	}
	last, err := b.Last(t.Context(), "k")
	if err != nil || string(last.Value) != "v" {
		t.Fatalf("the key holds %q (%v), want the write stored", last.Value, err)
	}
}
