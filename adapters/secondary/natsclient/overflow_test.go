package natsclient_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// A value twenty times the broker's max payload goes up as an uploaded
// request and comes back as a parked reply, through the plain facade.
func TestAValueLargerThanAMessageTravelsThroughOverflow(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	store, err := memory.Open(t.Context(), memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e := serveEngine(t, url, func(*natsapi.TransferHost) []natsapi.Service { return []natsapi.Service{natsapi.KeyValue(store)} })
	nc := natstest.Connect(t, url)
	if nc.MaxPayload() != 1<<20 {
		t.Fatalf("the broker's max payload is %d, want 1 MiB", nc.MaxPayload())
	}
	kv := natsclient.NewKeyValue(natsclient.New(nc))
	value := make([]byte, 20<<20)
	for i := range value {
		value[i] = byte(i % 251)
	}
	if err := kv.Set(t.Context(), "big", value, 0); err != nil {
		t.Fatalf("Set of 20 MiB: %v", err)
	}
	stored, err := store.Get(t.Context(), "big")
	if err != nil || !bytes.Equal(stored, value) {
		t.Fatalf("the engine stored %d bytes, %v; want the 20 MiB sent", len(stored), err)
	}
	got, err := kv.Get(t.Context(), "big")
	if err != nil || !bytes.Equal(got, value) {
		t.Fatalf("Get of 20 MiB gave %d bytes, %v", len(got), err)
	}
	if n := e.overflow.Open(); n != 0 {
		t.Fatalf("%d overflow sessions left open", n)
	}
	if _, err := kv.Get(t.Context(), "absent"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("a small call through the same path: %v, want ErrNotFound", err)
	}
}
