package natsclient_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// A value six times the broker's max payload goes up as an uploaded
// request and comes back as a parked reply, through the plain facade.
func TestAValueLargerThanAMessageTravelsThroughOverflow(t *testing.T) {
	url, caller := broker(t)
	store, err := memory.Open(t.Context(), memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e := serveEngine(t, url, func(*natsapi.TransferHost) []natsapi.Service { return []natsapi.Service{natsapi.KeyValue(store)} })
	nc := caller(t)
	if nc.MaxPayload() != 1<<20 {
		t.Fatalf("the broker's max payload is %d, want 1 MiB", nc.MaxPayload())
	}
	kv := natsclient.NewKeyValue(natsclient.New(nc))
	value := make([]byte, 6<<20)
	for i := range value {
		value[i] = byte(i % 251)
	}
	// A generous deadline: under the race detector on a busy machine,
	// encoding megabytes of base64 is slow, and speed is not the point here.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := kv.Set(ctx, "big", value, 0); err != nil {
		t.Fatalf("Set of 6 MiB: %v", err)
	}
	stored, err := store.Get(t.Context(), "big")
	if err != nil || !bytes.Equal(stored, value) {
		t.Fatalf("the engine stored %d bytes, %v; want the 6 MiB sent", len(stored), err)
	}
	got, err := kv.Get(ctx, "big")
	if err != nil || !bytes.Equal(got, value) {
		t.Fatalf("Get of 6 MiB gave %d bytes, %v", len(got), err)
	}
	if n := e.overflow.Open(); n != 0 {
		t.Fatalf("%d overflow sessions left open", n)
	}
	if _, err := kv.Get(t.Context(), "absent"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("a small call through the same path: %v, want ErrNotFound", err)
	}
}

// The size a parked answer announces is the answerer's word, not yet backed
// by bytes: a size no buffer can hold, from a faulty engine, is an error
// for the call, not a crash of the caller's process.
func TestAnAnnouncedSizeIsNotTrustedBeforeItsBytesCome(t *testing.T) {
	url, caller := broker(t)
	responder := natstest.Connect(t, url) // an engine's user: it may answer on the services' subjects
	if _, err := responder.Subscribe(wire.Subject(ports.ServiceKeyValue, wire.KVGet), func(m *nats.Msg) {
		reply := nats.NewMsg(m.Reply)
		reply.Header.Set(wire.OverflowReplyHeader, "someone:parked")
		reply.Header.Set(wire.OverflowSecretHeader, "secret")
		reply.Header.Set(wire.OverflowSizeHeader, "9000000000000000000")
		_ = responder.PublishMsg(reply)
	}); err != nil {
		t.Fatal(err)
	}
	kv := natsclient.NewKeyValue(natsclient.New(caller(t), natsclient.WithTimeout(2*time.Second)))
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("a Get whose answer announced 9e18 bytes panicked: %v", r)
		}
	}()
	if _, err := kv.Get(t.Context(), "k"); err == nil {
		t.Fatal("a Get of an answer nobody can fetch succeeded")
	}
}
