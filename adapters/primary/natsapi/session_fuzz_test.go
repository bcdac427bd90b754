package natsapi

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/secondary/objectstorage/memory"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// expected reports whether err is one a session call may answer with
// outside input: anything else (a 500, a panic, a hang) is a defect.
func expected(err error) bool {
	for _, e := range []error{ports.ErrInvalidArgument, ports.ErrNotFound, ports.ErrConflict, ports.ErrTooLarge, wire.ErrUnavailable} {
		if errors.Is(err, e) {
			return true
		}
	}
	return err == nil
}

// closeAll closes every session of t, so each input starts afresh.
func closeAll(t *sessionTable) {
	t.mu.Lock()
	var open []*session
	for _, s := range t.sessions {
		open = append(open, s)
	}
	t.mu.Unlock()
	for _, s := range open {
		t.close(s)
	}
}

// pick is the session an input names: a real one, or one made of it.
func pick(which uint8, refs []wire.SessionRef, id string) wire.SessionRef {
	if int(which) < len(refs) {
		return refs[which]
	}
	if which%2 == 0 && len(refs) > 0 {
		return wire.SessionRef{ID: refs[0].ID, Secret: id}
	}
	return wire.SessionRef{ID: id, Secret: id}
}

// withDeadline fails the input when f does not return: a session call
// must never stall.
func withDeadline(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return in 10s", what)
	}
}

// FuzzTransferRequests feeds any open body, and any operation, session
// headers and body to a transfer host holding an upload and a download.
func FuzzTransferRequests(f *testing.F) {
	nc := natstest.Connect(f, natstest.StartServer(f).ClientURL())
	store, err := memory.Open(context.Background(), memory.Config{})
	if err != nil {
		f.Fatal(err)
	}
	if _, err := store.Put(context.Background(), "obj", strings.NewReader("an object of forty bytes, or near enough"), ports.PutObjectOptions{}); err != nil {
		f.Fatal(err)
	}
	owner := domain.NewInstanceID()
	h, err := NewTransferHost(TransferOptions{Owner: owner, Conn: nc, ChunkSize: 16, Idle: time.Minute})
	if err != nil {
		f.Fatal(err)
	}
	if err := h.Serve(); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(h.Stop)
	svc := ObjectStorage(store, h)

	f.Fuzz(func(t *testing.T, op string, which uint8, seq string, body []byte) {
		defer closeAll(h.t)
		for _, ep := range svc.Endpoints {
			withDeadline(t, ep.Name, func() {
				if _, err := ep.Handler(context.Background(), &Call{Data: body}); !expected(err) {
					t.Fatalf("%s(%q): unexpected error %v", ep.Name, body, err)
				}
			})
		}
		put, err := h.open(context.Background(), store, "", "", wire.TransferOpen{Mode: wire.TransferPut, Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		get, err := h.open(context.Background(), store, "", "", wire.TransferOpen{Mode: wire.TransferGet, Key: "obj"})
		if err != nil {
			t.Fatal(err)
		}
		ref := pick(which, []wire.SessionRef{put.Ref(), get.Ref()}, string(body))
		msg := &nats.Msg{
			Subject: wire.OwnerSubject(ports.ServiceObjectStorage, owner, op),
			Header:  nats.Header{wire.SessionHeader: {ref.ID}, wire.SessionSecretHeader: {ref.Secret}, wire.SeqHeader: {seq}},
			Data:    body,
		}
		withDeadline(t, op, func() {
			if _, _, err := h.t.handle(msg); !expected(err) {
				t.Fatalf("%s seq %q body %q: unexpected error %v", op, seq, body, err)
			}
		})
	})
}

// FuzzOverflowRequests feeds any upload open body, any operation, session
// headers and body, and any uploaded-request headers to an overflow host
// holding a parked reply and an upload.
func FuzzOverflowRequests(f *testing.F) {
	nc := natstest.Connect(f, natstest.StartServer(f).ClientURL())
	owner := domain.NewInstanceID()
	h, err := NewOverflowHost(OverflowOptions{Owner: owner, Conn: nc, ChunkSize: 16, MaxValue: 1 << 10, Idle: time.Minute})
	if err != nil {
		f.Fatal(err)
	}
	if err := h.Serve(); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(h.Stop)
	open := h.service().Endpoints[0]

	f.Fuzz(func(t *testing.T, op string, which uint8, seq string, body []byte) {
		defer closeAll(h.t)
		if _, err := open.Handler(context.Background(), &Call{Data: body}); !expected(err) {
			t.Fatalf("open(%q): unexpected error %v", body, err)
		}
		reply, err := h.park(&Call{}, []byte("a parked reply of forty bytes, near it."))
		if err != nil {
			t.Fatal(err)
		}
		up, err := h.start("", &held{h: h, reserved: 8, upload: true}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		refs := []wire.SessionRef{{ID: reply.id, Secret: reply.secret}, {ID: up.id, Secret: up.secret}}
		ref := pick(which, refs, string(body))
		msg := &nats.Msg{
			Subject: wire.OverflowSubject(owner, op),
			Header:  nats.Header{wire.SessionHeader: {ref.ID}, wire.SessionSecretHeader: {ref.Secret}, wire.SeqHeader: {seq}},
			Data:    body,
		}
		withDeadline(t, op, func() {
			if _, _, err := h.t.handle(msg); !expected(err) {
				t.Fatalf("%s seq %q body %q: unexpected error %v", op, seq, body, err)
			}
		})
		_, release, err := h.take(ref.ID, seq, "")
		if !expected(err) {
			t.Fatalf("take(%q, %q): unexpected error %v", ref.ID, seq, err)
		}
		if err == nil {
			release()
		}
	})
}
