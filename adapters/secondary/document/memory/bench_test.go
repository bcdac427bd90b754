package memory_test

import (
	"runtime"
	"strconv"
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/document/memory"
	"github.com/abi-engine/engine/ports"
)

// BenchmarkPut puts small documents from 64 goroutines, as many as the
// kernel call benchmarks' callers (go test -bench Put ./adapters/secondary/document/memory/).
func BenchmarkPut(b *testing.B) {
	store := memory.New()
	if err := store.EnsureCollection(b.Context(), "bench"); err != nil {
		b.Fatal(err)
	}
	data := map[string]any{"name": "bench", "n": 1.0}
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = "doc-" + strconv.Itoa(i)
	}
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			if _, err := store.Put(b.Context(), "bench", ids[i%len(ids)], data, ports.Cond{}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
