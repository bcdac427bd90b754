package contracttests_test

import (
	"context"
	"maps"
	"os"
	"strings"
	"sync"
	"testing"

	docmemory "github.com/abi-engine/engine/adapters/secondary/document/memory"
	vecmemory "github.com/abi-engine/engine/adapters/secondary/vectorstore/memory"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

// kept is what a store that keeps its callers' maps and slices holds: the
// data each write was given, by collection and id.
type kept[V any] struct {
	mu   sync.Mutex
	byID map[string]V
}

func (k *kept[V]) put(collection, id string, v V) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.byID == nil {
		k.byID = map[string]V{}
	}
	k.byID[collection+"/"+id] = v
}

func (k *kept[V]) get(collection, id string) (V, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	v, ok := k.byID[collection+"/"+id]
	return v, ok
}

// keepingDocs is a correct document store that copies a document's map
// only at its top: Put and Get answer with copies of the map it keeps,
// which share that map's nested objects and lists.
type keepingDocs struct {
	*docmemory.Store
	k *kept[map[string]any]
}

func (s keepingDocs) Put(ctx context.Context, collection, id string, data map[string]any, cond ports.Cond) (ports.Document, error) {
	d, err := s.Store.Put(ctx, collection, id, data, cond)
	if err == nil {
		s.k.put(collection, id, maps.Clone(d.Data))
	}
	return d, err
}

func (s keepingDocs) Get(ctx context.Context, collection, id string) (ports.Document, error) {
	d, err := s.Store.Get(ctx, collection, id)
	if data, ok := s.k.get(collection, id); err == nil && ok {
		d.Data = maps.Clone(data)
	}
	return d, err
}

// keepingVectors is a correct vector store whose Get answers with the
// values as they were upserted, the caller's own slice.
type keepingVectors struct {
	*vecmemory.Store
	k *kept[ports.Vector]
}

func (s keepingVectors) Upsert(ctx context.Context, collection string, vectors []ports.Vector) error {
	err := s.Store.Upsert(ctx, collection, vectors)
	if err == nil {
		for _, v := range vectors {
			s.k.put(collection, v.ID, v)
		}
	}
	return err
}

func (s keepingVectors) Get(ctx context.Context, collection, id string) (ports.Vector, error) {
	v, err := s.Store.Get(ctx, collection, id)
	if given, ok := s.k.get(collection, id); err == nil && ok {
		v.Values = given.Values
	}
	return v, err
}

// A store that keeps the caller's vector, or copies a document only at
// its top, lets a caller change what is stored without a write; the
// document and vector suites must fail it, as the keyvalue suite fails a
// store that keeps the caller's bytes (ValuesAreCopied). The suites run in
// a child process, since a failure is the expected outcome.
func TestTheSuitesFailAStoreThatSharesDataWithItsCallers(t *testing.T) {
	if os.Getenv(faultEnv) == "SharesDataWithItsCallers" {
		t.Run("document", func(t *testing.T) {
			contracttests.RunDocument(t, contracttests.HarnessFunc[ports.DocumentStore](func(t *testing.T) func(*testing.T) ports.DocumentStore {
				store, k := docmemory.New(), &kept[map[string]any]{}
				return func(*testing.T) ports.DocumentStore { return keepingDocs{store, k} }
			}), contracttests.DocumentCapabilities{})
		})
		t.Run("vector_store", func(t *testing.T) {
			contracttests.RunVectorStore(t, contracttests.HarnessFunc[ports.VectorStore](func(t *testing.T) func(*testing.T) ports.VectorStore {
				store, err := vecmemory.Open(t.Context(), vecmemory.Config{})
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				k := &kept[ports.Vector]{}
				return func(*testing.T) ports.VectorStore { return keepingVectors{store, k} }
			}), contracttests.VectorStoreCapabilities{})
		})
		return
	}
	out, err := runFault(t, "^TestTheSuitesFailAStoreThatSharesDataWithItsCallers$/^(document|vector_store)$/^(DataIsCopied|VectorsAreCopied|PutThenGet|UpsertThenGet)$", "SharesDataWithItsCallers")
	if err == nil {
		t.Fatalf("the suites passed a store that shares data with its callers:\n%s", out)
	}
	if strings.Contains(string(out), "panic:") {
		t.Fatalf("a suite panicked on a store that shares data with its callers:\n%s", out)
	}
	for _, want := range []string{
		"--- FAIL: TestTheSuitesFailAStoreThatSharesDataWithItsCallers/document/DataIsCopied",
		"Get after the caller changed the data Put returned: data",
		"--- PASS: TestTheSuitesFailAStoreThatSharesDataWithItsCallers/document/PutThenGet",
		"--- FAIL: TestTheSuitesFailAStoreThatSharesDataWithItsCallers/vector_store/VectorsAreCopied",
		"Get after the caller changed the vector it upserted: values [99 2], want [1 2]",
		"--- PASS: TestTheSuitesFailAStoreThatSharesDataWithItsCallers/vector_store/UpsertThenGet",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the suites' output lacks %q:\n%s", want, out)
		}
	}
}
