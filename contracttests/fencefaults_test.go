package contracttests_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	docmemory "github.com/abi-engine/engine/adapters/secondary/document/memory"
	"github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
	vecmemory "github.com/abi-engine/engine/adapters/secondary/vectorstore/memory"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

// fence is the fence of a store the handles of fenced below share: the
// newest token a write carried. With lowers set, a write without a token
// puts it back to nothing, the fault these tests plant.
type fence struct {
	mu     sync.Mutex
	seen   uint64
	lowers bool
}

// write runs do as a write under ctx's token, refusing it when the fence
// has seen a newer term.
func (f *fence) write(ctx context.Context, do func() error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	token, ok := ports.FencingToken(ctx)
	switch {
	case !ok && f.lowers:
		f.seen = 0
	case ok && token < f.seen:
		return fmt.Errorf("token %d under %d: %w", token, f.seen, ports.ErrFenced)
	case ok:
		f.seen = token
	}
	return do()
}

type fencedKV struct {
	*memory.Store
	f *fence
}

func (s fencedKV) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	return s.f.write(ctx, func() error { return s.Store.Set(ctx, key, value, ttl) })
}

func (s fencedKV) SetIfAbsent(ctx context.Context, key string, value []byte, ttl time.Duration) (ok bool, err error) {
	err = s.f.write(ctx, func() error { ok, err = s.Store.SetIfAbsent(ctx, key, value, ttl); return err })
	return ok, err
}

func (s fencedKV) Delete(ctx context.Context, key string) (ok bool, err error) {
	err = s.f.write(ctx, func() error { ok, err = s.Store.Delete(ctx, key); return err })
	return ok, err
}

func (s fencedKV) DeleteIfValue(ctx context.Context, key string, value []byte) (ok bool, err error) {
	err = s.f.write(ctx, func() error { ok, err = s.Store.DeleteIfValue(ctx, key, value); return err })
	return ok, err
}

type fencedDocs struct {
	*docmemory.Store
	f *fence
}

func (s fencedDocs) EnsureCollection(ctx context.Context, name string) error {
	return s.f.write(ctx, func() error { return s.Store.EnsureCollection(ctx, name) })
}

func (s fencedDocs) DropCollection(ctx context.Context, name string) error {
	return s.f.write(ctx, func() error { return s.Store.DropCollection(ctx, name) })
}

func (s fencedDocs) Put(ctx context.Context, collection, id string, data map[string]any, cond ports.Cond) (d ports.Document, err error) {
	err = s.f.write(ctx, func() error { d, err = s.Store.Put(ctx, collection, id, data, cond); return err })
	return d, err
}

func (s fencedDocs) Delete(ctx context.Context, collection, id string, cond ports.Cond) error {
	return s.f.write(ctx, func() error { return s.Store.Delete(ctx, collection, id, cond) })
}

type fencedVectors struct {
	*vecmemory.Store
	f *fence
}

func (s fencedVectors) CreateCollection(ctx context.Context, name string, dimension int, metric ports.Metric) error {
	return s.f.write(ctx, func() error { return s.Store.CreateCollection(ctx, name, dimension, metric) })
}

func (s fencedVectors) DeleteCollection(ctx context.Context, name string) error {
	return s.f.write(ctx, func() error { return s.Store.DeleteCollection(ctx, name) })
}

func (s fencedVectors) Upsert(ctx context.Context, collection string, vectors []ports.Vector) error {
	return s.f.write(ctx, func() error { return s.Store.Upsert(ctx, collection, vectors) })
}

func (s fencedVectors) Delete(ctx context.Context, collection string, ids []string) error {
	return s.f.write(ctx, func() error { return s.Store.Delete(ctx, collection, ids) })
}

// A write without a token (a tool's, a test's) passes a fence and leaves
// it where it was: a store that took it as the token 0, and let it lower
// the fence, would take the writes of an engine paused across a takeover
// once anything wrote without a token, over its successor's. Each fenced
// suite must fail such a store, and pass the same store with the fault
// taken out. The suites run in a child process, since a failure is the
// expected outcome.
func TestTheFencedSuitesFailAWriteWithoutATokenThatLowersTheFence(t *testing.T) {
	if fault := os.Getenv(faultEnv); strings.HasPrefix(fault, "fence:") {
		lowers := strings.HasSuffix(fault, ":lowers")
		t.Run("keyvalue", func(t *testing.T) {
			contracttests.RunKeyValue(t, contracttests.HarnessFunc[ports.KeyValue](func(t *testing.T) func(*testing.T) ports.KeyValue {
				store, f := memory.New(), &fence{lowers: lowers}
				return func(*testing.T) ports.KeyValue { return fencedKV{store, f} }
			}), contracttests.KeyValueCapabilities{Fenced: true})
		})
		t.Run("document", func(t *testing.T) {
			contracttests.RunDocument(t, contracttests.HarnessFunc[ports.DocumentStore](func(t *testing.T) func(*testing.T) ports.DocumentStore {
				store, f := docmemory.New(), &fence{lowers: lowers}
				return func(*testing.T) ports.DocumentStore { return fencedDocs{store, f} }
			}), contracttests.DocumentCapabilities{Fenced: true})
		})
		t.Run("vector_store", func(t *testing.T) {
			contracttests.RunVectorStore(t, contracttests.HarnessFunc[ports.VectorStore](func(t *testing.T) func(*testing.T) ports.VectorStore {
				store, err := vecmemory.Open(t.Context(), vecmemory.Config{})
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				f := &fence{lowers: lowers}
				return func(*testing.T) ports.VectorStore { return fencedVectors{store, f} }
			}), contracttests.VectorStoreCapabilities{Fenced: true})
		})
		return
	}
	run := func(t *testing.T, fault string) string {
		t.Helper()
		out, err := runFault(t, "^TestTheFencedSuitesFailAWriteWithoutATokenThatLowersTheFence$/^(keyvalue|document|vector_store)$/^AnOlderTermIsFenced$", fault)
		if fault == "fence:" && err != nil {
			t.Fatalf("the fenced suites failed a store with a correct fence:\n%s", out)
		}
		return string(out)
	}
	run(t, "fence:")
	out := run(t, "fence:lowers")
	if strings.Contains(out, "panic:") {
		t.Fatalf("a suite panicked on a store whose write without a token lowers the fence:\n%s", out)
	}
	for _, w := range []string{
		"--- FAIL: TestTheFencedSuitesFailAWriteWithoutATokenThatLowersTheFence/keyvalue/AnOlderTermIsFenced",
		"Set of an older term after a write without a token under an older term: ",
		"--- FAIL: TestTheFencedSuitesFailAWriteWithoutATokenThatLowersTheFence/document/AnOlderTermIsFenced",
		"Put of an older term after a write without a token under an older term: ",
		"--- FAIL: TestTheFencedSuitesFailAWriteWithoutATokenThatLowersTheFence/vector_store/AnOlderTermIsFenced",
		"Upsert of an older term after a write without a token under an older term: ",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("the suites' output lacks %q:\n%s", w, out)
		}
	}
}
