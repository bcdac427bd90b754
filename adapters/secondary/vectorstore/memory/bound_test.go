package memory_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/vectorstore/memory"
	"github.com/abi-engine/engine/ports"
)

// A store opened without settings holds at most 256 MiB: a caller
// upserting batch after batch is refused with ports.ErrStorageFull, which
// the API answers 507, once the store is full, and what was stored stays.
// Before, the store held whatever callers sent, until the engine, holding
// the lease, ran out of memory.
func TestAVectorStoreWithoutSettingsRefusesUpsertsPast256MiB(t *testing.T) {
	s, err := memory.Open(t.Context(), memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	const dim = 8192 // 64 KiB a vector, stored and indexed
	if err := s.CreateCollection(t.Context(), "v", dim, ports.MetricEuclid); err != nil {
		t.Fatal(err)
	}
	values := make([]float32, dim)
	batch := func(b int) []ports.Vector {
		vs := make([]ports.Vector, 64) // 4 MiB
		for i := range vs {
			vs[i] = ports.Vector{ID: fmt.Sprintf("b%02d-%02d", b, i), Values: values}
		}
		return vs
	}
	n := 0
	for ; n < 80; n++ {
		if err = s.Upsert(t.Context(), "v", batch(n)); err != nil {
			break
		}
	}
	if !errors.Is(err, ports.ErrStorageFull) || n != 63 {
		t.Fatalf("upserted %d batches of 4 MiB into a store without settings: %v, want ports.ErrStorageFull at the 64th", n, err)
	}
	if count, err := s.Count(t.Context(), "v"); count != 63*64 || err != nil {
		t.Fatalf("Count after the refused batch = %d, %v; want the %d vectors stored before it", count, err, 63*64)
	}
}

// vecCost is what a vector without payload counts against max_bytes: its
// id, its values twice (the stored copy and the index's) and the upkeep.
func vecCost(id string, dim int) int64 { return int64(len(id)+8*dim) + memory.EntryOverhead }

// collCost is what an empty collection counts: its name and the upkeep.
func collCost(name string) int64 { return int64(len(name)) + memory.CollectionOverhead }

func open(t *testing.T, maxBytes int64) *memory.Store {
	t.Helper()
	s, err := memory.Open(t.Context(), memory.Config{MaxBytes: maxBytes})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// A full store refuses an upsert that needs room, all of it, and a new
// collection, as storage full, naming max_bytes; an upsert that frees as
// much as it takes (vectors replaced by ones as large) is stored, and so
// are the upserts made once a delete or a dropped collection made room.
func TestAFullVectorStoreRefusesWhatNeedsRoomAndKeepsWhatItHolds(t *testing.T) {
	ctx := t.Context()
	const dim = 4
	v := func(id string, x float32) ports.Vector { return ports.Vector{ID: id, Values: []float32{x, 0, 0, 0}} }
	// Room for the two collections, two vectors, and a third vector or a
	// third collection, whichever is larger.
	s := open(t, 2*collCost("c")+2*vecCost("a", dim)+max(vecCost("a", dim), collCost("g")))
	for _, c := range []string{"c", "e"} {
		if err := s.CreateCollection(ctx, c, dim, ports.MetricEuclid); err != nil {
			t.Fatalf("CreateCollection(%s): %v", c, err)
		}
	}
	if err := s.Upsert(ctx, "c", []ports.Vector{v("a", 1), v("b", 2)}); err != nil {
		t.Fatalf("Upsert of two into room for three: %v", err)
	}
	err := s.Upsert(ctx, "c", []ports.Vector{v("d", 3), v("f", 4)})
	if !errors.Is(err, ports.ErrStorageFull) || !strings.Contains(err.Error(), "max_bytes") {
		t.Fatalf("Upsert of two more into room for one: %v, want ErrStorageFull naming max_bytes", err)
	}
	if n, _ := s.Count(ctx, "c"); n != 2 {
		t.Fatalf("Count after the refused upsert = %d, want 2: a refused batch writes nothing", n)
	}
	if err := s.CreateCollection(ctx, "g", dim, ports.MetricEuclid); err != nil {
		t.Fatalf("a new collection in room left for it: %v", err)
	}
	if err := s.Upsert(ctx, "c", []ports.Vector{v("d", 3)}); !errors.Is(err, ports.ErrStorageFull) {
		t.Fatalf("Upsert into a full store: %v, want ErrStorageFull", err)
	}
	if err := s.Upsert(ctx, "c", []ports.Vector{v("a", 5), v("b", 6)}); err != nil {
		t.Fatalf("replacing vectors by ones as large in a full store: %v", err)
	}
	if err := s.Delete(ctx, "c", []string{"a"}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := s.Upsert(ctx, "c", []ports.Vector{v("d", 3)}); err != nil {
		t.Fatalf("Upsert once a delete made room: %v", err)
	}
	if err := s.DeleteCollection(ctx, "c"); err != nil {
		t.Fatalf("DeleteCollection: %v", err)
	}
	if err := s.Upsert(ctx, "e", []ports.Vector{v("a", 1), v("b", 2)}); err != nil {
		t.Fatalf("Upsert once a dropped collection made room: %v", err)
	}
}

// A batch larger than the whole store is refused as too large, 413, not
// as storage full: no room made would let it in.
func TestABatchLargerThanTheStoreIsRefusedAsTooLarge(t *testing.T) {
	s := open(t, 1024)
	if err := s.CreateCollection(t.Context(), "c", 128, ports.MetricDot); err != nil {
		t.Fatal(err)
	}
	err := s.Upsert(t.Context(), "c", []ports.Vector{{ID: "a", Values: make([]float32, 128)}})
	if !errors.Is(err, ports.ErrTooLarge) || !strings.Contains(err.Error(), "max_bytes") {
		t.Fatalf("Upsert of a vector over 1024 bytes into a store of 1024: %v, want ErrTooLarge naming max_bytes", err)
	}
}

// A negative max_bytes is refused, naming the setting; 0 is the default.
func TestANegativeMaxBytesIsRefused(t *testing.T) {
	err := memory.Config{MaxBytes: -1}.Check("services.vector_store.config")
	if !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), "services.vector_store.config.max_bytes") {
		t.Fatalf("Check of max_bytes -1 = %v, want ErrInvalidArgument naming services.vector_store.config.max_bytes", err)
	}
	if _, err := memory.Open(t.Context(), memory.Config{MaxBytes: -1}); !errors.Is(err, ports.ErrInvalidArgument) {
		t.Fatalf("Open with max_bytes -1 = %v, want ErrInvalidArgument", err)
	}
	c := memory.Config{}
	if c.Default(""); c.MaxBytes != memory.DefaultMaxBytes {
		t.Fatalf("the default max_bytes is %d, want %d", c.MaxBytes, memory.DefaultMaxBytes)
	}
}
