package memory

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/internal/maxbytes/maxbytestest"
	"github.com/abi-engine/engine/ports"
)

// What a store counts against max_bytes is no less than the heap it holds
// for its vectors, whatever their shape: many small vectors, payloads of
// many short fields, arrays and nested objects, a collection past its
// index threshold with its graph built, and empty collections. Before, the
// store counted a payload as its JSON text and a vector or a collection as
// 128 bytes of upkeep: small vectors held 1.6 times what they counted,
// payloads of two fields 4.3 times, of ten fields 7.4 times, empty
// collections 4.6 times, so a full store of 256 MiB could hold well over a
// GiB of the engine's memory. It also counts no more than four times the
// heap, so that a store does not fill far short of its bound.
func TestTheBoundCountsNoLessThanTheHeapTheStoreHolds(t *testing.T) {
	shapes := []struct {
		name      string
		dim       int
		threshold int
		payload   func(i int) map[string]any
	}{
		{name: "one value, no payload", dim: 1, threshold: -1},
		{name: "a payload of two fields", dim: 1, threshold: -1, payload: func(i int) map[string]any {
			return map[string]any{"kind": fmt.Sprint("k", i%10), "n": i}
		}},
		{name: "a payload of ten fields", dim: 1, threshold: -1, payload: func(i int) map[string]any {
			p := map[string]any{}
			for j := range 10 {
				p[fmt.Sprint("f", j)] = i + j
			}
			return p
		}},
		{name: "an array of ten strings", dim: 1, threshold: -1, payload: func(i int) map[string]any {
			var tags []any
			for j := range 10 {
				tags = append(tags, fmt.Sprint("t", i+j))
			}
			return map[string]any{"tags": tags}
		}},
		{name: "nested objects", dim: 1, threshold: -1, payload: func(i int) map[string]any {
			return map[string]any{"a": map[string]any{"b": map[string]any{"c": i}}, "x": true}
		}},
		{name: "dimension 384", dim: 384, threshold: -1, payload: func(i int) map[string]any {
			return map[string]any{"kind": fmt.Sprint("k", i%10), "n": i}
		}},
		{name: "one value, in a graph", dim: 1, threshold: 1000},
		{name: "dimension 64, in a graph", dim: 64, threshold: 1000},
	}
	for _, sh := range shapes {
		for _, n := range []int{5_000, 14_500} {
			t.Run(fmt.Sprintf("%s, %d vectors", sh.name, n), func(t *testing.T) {
				vectors := make([]ports.Vector, n)
				for i := range vectors {
					values := make([]float32, sh.dim)
					for j := range values {
						values[j] = float32(i+j) + 1
					}
					vectors[i] = ports.Vector{ID: fmt.Sprintf("v%06d", i), Values: values}
					if sh.payload != nil {
						vectors[i].Payload = sh.payload(i)
					}
				}
				before := maxbytestest.Live()
				s, err := Open(t.Context(), Config{MaxBytes: 1 << 40, IndexThreshold: sh.threshold})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				if err := s.CreateCollection(t.Context(), "c", sh.dim, ports.MetricEuclid); err != nil {
					t.Fatal(err)
				}
				for i := 0; i < n; i += 500 {
					if err := s.Upsert(t.Context(), "c", vectors[i:min(i+500, n)]); err != nil {
						t.Fatal(err)
					}
				}
				if sh.threshold > 0 {
					idx := s.collections["c"].index
					for deadline := time.Now().Add(5 * time.Minute); !idx.Approximate() || !idx.Built(); {
						if time.Now().After(deadline) {
							t.Fatal("the graph was not built within 5 minutes")
						}
						time.Sleep(time.Millisecond)
					}
				}
				held := maxbytestest.Live() - before
				runtime.KeepAlive(vectors)
				counted := s.used.Load()
				t.Logf("counted %d bytes a vector, the heap holds %d", counted/int64(n), held/int64(n))
				maxbytestest.Check(t, held, counted)
				runtime.KeepAlive(s)
			})
		}
	}
	t.Run("empty collections", func(t *testing.T) {
		const n = 5_000
		before := maxbytestest.Live()
		s, err := Open(t.Context(), Config{MaxBytes: 1 << 40})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for i := range n {
			if err := s.CreateCollection(t.Context(), fmt.Sprintf("c%05d", i), 4, ports.MetricEuclid); err != nil {
				t.Fatal(err)
			}
		}
		held := maxbytestest.Live() - before
		counted := s.used.Load()
		t.Logf("counted %d bytes a collection, the heap holds %d", counted/n, held/n)
		maxbytestest.Check(t, held, counted)
		runtime.KeepAlive(s)
	})
}
