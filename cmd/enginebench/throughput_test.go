package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// A load counts only right answers. A responder that answers every call
// at once with the wrong value stands for an engine (or echo) that has
// gone wrong in a way no real one can be made to on purpose: were its
// answers counted, the bench would print a fine figure for a broken path.
func TestALoadWhoseAnswersAreWrongFailsInsteadOfCountingThem(t *testing.T) {
	nc := natstest.Connect(t, natstest.StartServer(t).ClientURL())
	stale, err := json.Marshal(wire.KVValue{Value: wire.Bytes("not the bench's value")})
	if err != nil {
		t.Fatal(err)
	}
	respond := func(subject string, data []byte) {
		if _, err := nc.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond(data) }); err != nil {
			t.Fatal(err)
		}
	}
	respond(wire.Subject(ports.ServiceKeyValue, wire.KVGet), stale)
	respond(echoSubject, []byte(`{"key":"other"}`))
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func(nc *nats.Conn) func(ctx context.Context, _ int) error{
		"keyvalue get": engineGet,
		"raw echo":     rawCall,
	} {
		st, err := drive(t.Context(), 1, 100*time.Millisecond, call(nc))
		if err == nil {
			t.Errorf("%s: a load of wrong answers measured %.1f calls/s, want an error", name, st.rps)
		}
	}
}
