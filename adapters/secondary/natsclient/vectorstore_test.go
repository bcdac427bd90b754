package natsclient_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/adapters/secondary/vectorstore/memory"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// The facade passes the same contract as a local store: facade, broker,
// endpoint, memory adapter.
func TestVectorStoreContract(t *testing.T) {
	t.Run("nats", func(t *testing.T) {
		contracttests.RunVectorStore(t, contracttests.HarnessFunc[ports.VectorStore](func(t *testing.T) func(*testing.T) ports.VectorStore {
			store, err := memory.Open(t.Context(), memory.Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = store.Close() })
			client := serve(t, natsapi.VectorStore(store))
			return func(t *testing.T) ports.VectorStore { return natsclient.NewVectorStore(client(t)) }
		}), contracttests.VectorStoreCapabilities{})
	})
}

// The facade sends an upsert's values packed; an engine from before the
// packed form refuses the field as unknown, and the facade sends the same
// vectors again as numbers. Here the older engine is a real host whose
// upsert reads the body as such an engine did: values only.
func TestAnUpsertToAnEngineThatReadsOnlyNumbersIsSentAgainAsNumbers(t *testing.T) {
	store, err := memory.Open(t.Context(), memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	type olderVector struct {
		ID      string         `json:"id"`
		Values  []float32      `json:"values"`
		Payload map[string]any `json:"payload,omitempty"`
	}
	type olderWrite struct {
		Collection string        `json:"collection"`
		Vectors    []olderVector `json:"vectors"`
	}
	var calls atomic.Int32
	older := natsapi.VectorStore(store)
	for i, ep := range older.Endpoints {
		if ep.Name == wire.VecUpsert {
			upsert := natsapi.JSON(func(ctx context.Context, r olderWrite) (wire.Empty, error) {
				vs := make([]ports.Vector, len(r.Vectors))
				for i, v := range r.Vectors {
					vs[i] = ports.Vector{ID: v.ID, Values: v.Values, Payload: v.Payload}
				}
				return wire.Empty{}, store.Upsert(ctx, r.Collection, vs)
			})
			older.Endpoints[i].Handler = func(ctx context.Context, c *natsapi.Call) ([]byte, error) {
				calls.Add(1)
				return upsert(ctx, c)
			}
		}
	}
	vs := natsclient.NewVectorStore(serve(t, older)(t))
	if err := vs.CreateCollection(t.Context(), "c", 3, ports.MetricCosine); err != nil {
		t.Fatal(err)
	}
	want := []float32{0.1, -2.5, 3e-7}
	if err := vs.Upsert(t.Context(), "c", []ports.Vector{{ID: "a", Values: want}}); err != nil {
		t.Fatalf("upsert to an engine that reads numbers only: %v", err)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("the older engine took %d upserts, want 2: the packed one it refused, then numbers", n)
	}
	got, err := vs.Get(t.Context(), "c", "a")
	if err != nil || !slices.Equal(got.Values, want) {
		t.Fatalf("get: %v %v, want %v", got.Values, err, want)
	}
	// A refusal for any other reason is the caller's answer, not resent.
	calls.Store(0)
	err = vs.Upsert(t.Context(), "c", []ports.Vector{{ID: "b", Values: []float32{1, 2}}})
	if !errors.Is(err, ports.ErrInvalidArgument) || calls.Load() != 2 {
		t.Fatalf("upsert of a vector of the wrong dimension: %v after %d calls, want ErrInvalidArgument after 2 (packed, then numbers)", err, calls.Load())
	}
}

// Values reach the store exactly, bit for bit, in the packed form:
// negative zero, the smallest subnormal and the largest float32 included.
func TestPackedValuesArriveBitForBit(t *testing.T) {
	store, err := memory.Open(t.Context(), memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	vs := natsclient.NewVectorStore(serve(t, natsapi.VectorStore(store))(t))
	want := []float32{float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, math.MaxFloat32, 1.0 / 3}
	if err := vs.CreateCollection(t.Context(), "c", len(want), ports.MetricDot); err != nil {
		t.Fatal(err)
	}
	if err := vs.Upsert(t.Context(), "c", []ports.Vector{{ID: "a", Values: want}}); err != nil {
		t.Fatal(err)
	}
	got, err := store.Get(t.Context(), "c", "a")
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if math.Float32bits(got.Values[i]) != math.Float32bits(want[i]) {
			t.Fatalf("value %d arrived as %v (%#x), want %v (%#x)", i, got.Values[i], math.Float32bits(got.Values[i]), want[i], math.Float32bits(want[i]))
		}
	}
}
