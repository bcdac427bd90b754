package natsapi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	vecmemory "github.com/abi-engine/engine/adapters/secondary/vectorstore/memory"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

func newMemoryVectors(tb testing.TB) ports.VectorStore {
	tb.Helper()
	store, err := vecmemory.Open(context.Background(), vecmemory.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	return store
}

func TestTheVectorStoreWireFormat(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	newHost(t, url, natsapi.Options{}, natsapi.VectorStore(newMemoryVectors(t)))
	checkWire(t, natstest.Connect(t, url), ports.ServiceVectorStore, nil, []wireStep{
		{"create_collection", `{"name":"v","dimension":2,"metric":"dot"}`, `{}`, ""},
		{"create_collection", `{"name":"v","dimension":3,"metric":"dot"}`, ``, "409"},
		{"create_collection", `{"name":"w","dimension":2,"metric":"manhattan"}`, ``, "400"},
		{"collections", ``, `{"collections":[{"name":"v","dimension":2,"metric":"dot"}]}`, ""},
		{"upsert", `{"collection":"v","vectors":[{"id":"a","values":[1,0],"payload":{"k":"x","n":3}},{"id":"b","values":[0.5,0.25]}]}`, `{}`, ""},
		{"upsert", `{"collection":"v","vectors":[{"id":"c","values":[1,2,3]}]}`, ``, "400"},
		{"search", `{"collection":"v","vector":[1,0],"k":1}`, `{"results":[{"id":"a","values":[1,0],"payload":{"k":"x","n":3},"score":1}]}`, ""},
		{"search", `{"collection":"v","vector":[1,1],"k":5,"filter":{"n":3}}`, `{"results":[{"id":"a","values":[1,0],"payload":{"k":"x","n":3},"score":1}]}`, ""},
		{"search", `{"collection":"v","vector":[1,1],"k":0}`, ``, "400"},
		{"get", `{"collection":"v","id":"b"}`, `{"id":"b","values":[0.5,0.25]}`, ""},
		{"count", `{"collection":"v"}`, `{"count":2}`, ""},
		{"delete", `{"collection":"v","ids":["a","missing"]}`, `{}`, ""},
		{"get", `{"collection":"v","id":"a"}`, ``, "404"},
		{"count", `{"collection":"nope"}`, ``, "404"},
		{"upsert", `{"collection":"v","vectors":[{"id":"big","values":[1e300,0]}]}`, ``, "400"},
		{"delete_collection", `{"name":"v"}`, `{}`, ""},
		{"collections", `{}`, `{"collections":[]}`, ""},
	})
}

// FuzzVectorStoreRequests runs every vector_store endpoint on any body,
// against a fresh store with a 2-dimensional collection "c".
func FuzzVectorStoreRequests(f *testing.F) {
	fuzzService(f, "vectorstore", func(t *testing.T) natsapi.Service {
		store := newMemoryVectors(t)
		if err := store.CreateCollection(context.Background(), "c", 2, ports.MetricCosine); err != nil {
			t.Fatal(err)
		}
		return natsapi.VectorStore(store)
	}, ports.ErrInvalidArgument, ports.ErrNotFound, ports.ErrConflict)
}

// A vector's values given as null, in either form, are refused with a 400
// naming the field, and nothing of the batch is written: null is neither
// numbers nor packed bytes, and read as the field left out it let a vector
// that named both forms through as if it gave only the other.
func TestAVectorWhoseValuesAreNullIsRefusedAndWritesNothing(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	store := newMemoryVectors(t)
	if err := store.CreateCollection(t.Context(), "v", 2, ports.MetricDot); err != nil {
		t.Fatal(err)
	}
	newHost(t, url, natsapi.Options{}, natsapi.VectorStore(store))
	nc := natstest.Connect(t, url)
	for body, field := range map[string]string{
		`{"collection":"v","vectors":[{"id":"a","values":[1,0],"values_f32":null}]}`:            "vectors[0].values_f32",
		`{"collection":"v","vectors":[{"id":"a","values_f32":null,"values":[1,0]}]}`:            "vectors[0].values_f32",
		`{"collection":"v","vectors":[{"id":"a","values_f32":"AACAPwAAAMA=","values":null}]}`:   "vectors[0].values",
		`{"collection":"v","vectors":[{"id":"b","values":[0,1]},{"id":"a","values_f32":null}]}`: "vectors[1].values_f32",
		`{"collection":"v","vectors":[{"id":"a","values":null}]}`:                               "vectors[0].values",
	} {
		reply, err := nc.Request(wire.Subject(ports.ServiceVectorStore, wire.VecUpsert), []byte(body), 5*time.Second)
		if err != nil {
			t.Fatalf("upsert %s: %v", body, err)
		}
		code, msg := reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader)
		if code != "400" || !strings.Contains(msg, `"`+field+`" is null`) {
			t.Errorf("upsert %s = %s (code %q %s), want a 400 naming %s as null", body, reply.Data, code, msg, field)
		}
	}
	if n, err := store.Count(t.Context(), "v"); err != nil || n != 0 {
		t.Errorf("after the refused upserts the collection holds %d vectors (%v), want none", n, err)
	}
}
