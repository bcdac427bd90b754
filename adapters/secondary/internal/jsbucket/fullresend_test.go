package jsbucket

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// fullOnResend stores a write's first attempt but reports its
// acknowledgement lost, lets meantime run, and refuses every resend as
// over the account's storage. A replicated stream checks the account's
// and the server's storage before it looks at the message id, so it
// refuses the resend of a write it stored, a write that may itself have
// used up the room; a lost reply cannot be made to happen on demand
// against a real broker, nor a replicated stream run by the test server.
type fullOnResend struct {
	jetstream.JetStream
	calls    int
	meantime func()
}

func (f *fullOnResend) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	f.calls++
	if f.calls == 1 {
		if _, err := f.JetStream.PublishMsg(ctx, m, opts...); err != nil {
			return nil, err
		}
		if f.meantime != nil {
			f.meantime()
		}
		return nil, nats.ErrTimeout
	}
	return nil, &jetstream.APIError{Code: 400, ErrorCode: 10002, Description: "resource limits exceeded for account"}
}

// A write whose first attempt was stored, its reply lost, and whose resend
// is refused for want of room is done, at the revision stored: it is not
// "storage full", which tells the caller that nothing was written.
func TestAWriteStoredBeforeItsResendWasRefusedAsFullIsDone(t *testing.T) {
	nc := natstest.Connect(t, natstest.StartServer(t).ClientURL())
	b, err := Open(t.Context(), nc, Config{Bucket: "FULLRESEND"}, "test")
	if err != nil {
		t.Fatal(err)
	}
	b.js = &fullOnResend{JetStream: b.js}
	rev, err := b.Put(t.Context(), "k", []byte("v"), 0, nil)
	if err != nil {
		t.Fatalf("Put whose first attempt was stored and whose resend was refused as full: %v, want it done", err)
	}
	last, err := b.Last(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if !last.Live || string(last.Value) != "v" || last.Revision != rev {
		t.Fatalf("Put reported revision %d; the key holds %q at revision %d (live %v)", rev, last.Value, last.Revision, last.Live)
	}
}

// On a replicated stream, a resend refused for want of room says nothing
// of the first attempt: when another write has come over the key since,
// whether ours was stored is unknown, and the write fails as such, neither
// "storage full" nor a refusal of the stream that a caller would take to
// mean nothing was stored.
func TestAResendToAReplicatedStreamRefusedAsFullLeavesTheOutcomeUnknown(t *testing.T) {
	nc := natstest.Connect(t, natstest.StartServer(t).ClientURL())
	b, err := Open(t.Context(), nc, Config{Bucket: "FULLRESENDR3"}, "test")
	if err != nil {
		t.Fatal(err)
	}
	// The test server runs one replica; the write goes as it would to
	// three.
	b.replicas = 3
	broker := b.js
	b.js = &fullOnResend{JetStream: broker, meantime: func() {
		if _, err := broker.Publish(t.Context(), b.Subject("k"), []byte("theirs")); err != nil {
			t.Error(err)
		}
	}}
	_, err = b.Put(t.Context(), "k", []byte("ours"), 0, nil)
	if err == nil || errors.Is(err, ports.ErrStorageFull) {
		t.Fatalf("Put stored, then written over by another, its resend refused as full: %v, want an unknown outcome", err)
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		t.Fatalf("Put of unknown outcome wraps the stream's refusal %v, which callers read as nothing stored", apiErr)
	}
}
