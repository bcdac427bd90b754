package natsapi_test

import (
	"context"
	"testing"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	vecmemory "github.com/abi-engine/engine/adapters/secondary/vectorstore/memory"
	"github.com/abi-engine/engine/internal/natstest"
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
