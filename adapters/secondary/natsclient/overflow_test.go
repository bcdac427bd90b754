package natsclient_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	docmemory "github.com/abi-engine/engine/adapters/secondary/document/memory"
	"github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	vecmemory "github.com/abi-engine/engine/adapters/secondary/vectorstore/memory"
	"github.com/abi-engine/engine/domain"
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

// The vector facade goes the way Call goes: an upsert batch past the
// broker's max payload is uploaded, and a search at k = MaxK over vectors
// of dimension 384, whose answer is megabytes, is parked and fetched, as
// ports.MaxK promises such a search can be answered.
func TestAVectorUpsertAndSearchLargerThanAMessageTravelThroughOverflow(t *testing.T) {
	url, caller := broker(t)
	store, err := vecmemory.Open(t.Context(), vecmemory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	e := serveEngine(t, url, func(*natsapi.TransferHost) []natsapi.Service { return []natsapi.Service{natsapi.VectorStore(store)} })
	nc := caller(t)
	vs := natsclient.NewVectorStore(natsclient.New(nc))
	// A generous deadline, as above: megabytes under the race detector.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const dim, n = 384, ports.MaxK
	if err := vs.CreateCollection(ctx, "v", dim, ports.MetricDot); err != nil {
		t.Fatal(err)
	}
	batch := make([]ports.Vector, n)
	for i := range batch {
		v := make([]float32, dim)
		for j := range v {
			v[j] = float32(i*dim+j) * 1e-7
		}
		batch[i] = ports.Vector{ID: fmt.Sprintf("v%04d", i), Values: v}
	}
	// 1000 vectors of 384 packed floats are 2 MiB of base64.
	if err := vs.Upsert(ctx, "v", batch); err != nil {
		// The search is still checked, over vectors put in the engine's
		// store directly.
		t.Errorf("Upsert of %d vectors of dimension %d (max payload %d): %v", n, dim, nc.MaxPayload(), err)
		if err := store.Upsert(t.Context(), "v", batch); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := store.Count(t.Context(), "v"); err != nil || got != n {
		t.Fatalf("the engine holds %d vectors, %v; want %d", got, err, n)
	}
	got, err := vs.Search(ctx, "v", batch[0].Values, ports.MaxK, nil)
	if err != nil || len(got) != n {
		t.Fatalf("Search at k=MaxK over %d vectors of dimension %d: %d results, %v", n, dim, len(got), err)
	}
	if open := e.overflow.Open(); open != 0 {
		t.Fatalf("%d overflow sessions left open", open)
	}
}

// The document facade goes the way Call goes too: a Put of a document past
// the broker's max payload is uploaded, and its answer, which repeats the
// document, and a Find that returns it are parked and fetched.
func TestADocumentLargerThanAMessageTravelsThroughOverflow(t *testing.T) {
	url, caller := broker(t)
	store, err := docmemory.Open(t.Context(), docmemory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	e := serveEngine(t, url, func(*natsapi.TransferHost) []natsapi.Service { return []natsapi.Service{natsapi.Document(store)} })
	nc := caller(t)
	docs := natsclient.NewDocument(natsclient.New(nc))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := docs.EnsureCollection(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("abcdefghij", 200_000) // 2 MB
	put, err := docs.Put(ctx, "c", "big", map[string]any{"kind": "big", "text": text}, ports.Cond{})
	if err != nil {
		t.Fatalf("Put of a %d-byte document (max payload %d): %v", len(text), nc.MaxPayload(), err)
	}
	if put.Data["text"] != text {
		t.Fatalf("Put answered a text of %d bytes, want %d", len(fmt.Sprint(put.Data["text"])), len(text))
	}
	found, _, err := docs.Find(ctx, "c", ports.Query{Where: map[string]any{"kind": "big"}})
	if err != nil || len(found) != 1 || found[0].Data["text"] != text {
		t.Fatalf("Find gave %d documents, %v; want the one of %d bytes", len(found), err, len(text))
	}
	if open := e.overflow.Open(); open != 0 {
		t.Fatalf("%d overflow sessions left open", open)
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

// An overflow session the engine closes under a call is no fault of the
// call's key or argument. A parked answer read too slowly (here any read
// past a millisecond) comes back as interrupted, not as "not found" for a
// key that exists; an upload that falls behind (here any write after its
// first) as unavailable, not as a bad argument, since no engine ran it.
func TestASessionClosedUnderACallIsNotTheCallersFault(t *testing.T) {
	url, caller := broker(t)
	store, err := memory.Open(t.Context(), memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	owner := domain.NewInstanceID()
	session := natstest.Connect(t, url)
	overflow, err := natsapi.NewOverflowHost(natsapi.OverflowOptions{
		Owner: owner, Conn: session, Idle: time.Millisecond, UploadIdle: time.Nanosecond, ChunkSize: 4 << 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	host, err := natsapi.NewHost(natsapi.Options{
		Owner:    owner,
		Connect:  func() (*nats.Conn, error) { return nats.Connect(url) },
		Replies:  session,
		Overflow: overflow,
	}, natsapi.KeyValue(store))
	if err != nil {
		t.Fatal(err)
	}
	for _, serve := range []func() error{overflow.Serve, host.Serve} {
		if err := serve(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { host.Stop(); overflow.Stop() })
	if err := store.Set(t.Context(), "big", make([]byte, 2<<20), 0); err != nil {
		t.Fatal(err)
	}
	kv := natsclient.NewKeyValue(natsclient.New(caller(t)))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := kv.Get(ctx, "big"); !errors.Is(err, wire.ErrInterrupted) || errors.Is(err, ports.ErrNotFound) {
		t.Errorf("Get of a key that exists, its answer read too slowly: %v; want interrupted, not not found", err)
	}
	if err := kv.Set(ctx, "big", make([]byte, 2<<20), 0); !errors.Is(err, wire.ErrUnavailable) || errors.Is(err, ports.ErrInvalidArgument) {
		t.Errorf("Set whose upload fell behind: %v; want unavailable, not a bad argument", err)
	}
}
