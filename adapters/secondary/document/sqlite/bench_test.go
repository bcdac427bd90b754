package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/document/sqlite"
	"github.com/abi-engine/engine/ports"
)

// benchPut puts small documents from 64 goroutines, as many as the kernel
// call benchmarks' callers, each call with ctx's fencing token, if any.
func benchPut(b *testing.B, ctx context.Context) {
	store, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(b.TempDir(), "documents.sqlite")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = store.Close() })
	if err := store.EnsureCollection(ctx, "bench"); err != nil {
		b.Fatal(err)
	}
	data := map[string]any{"name": "bench", "n": 1.0}
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			if _, err := store.Put(ctx, "bench", fmt.Sprintf("doc-%d", i%1000), data, ports.Cond{}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkPut and BenchmarkPutUnderATerm: what the fence costs a write
// (go test -bench Put ./adapters/secondary/document/sqlite/).
func BenchmarkPut(b *testing.B) { benchPut(b, b.Context()) }

func BenchmarkPutUnderATerm(b *testing.B) { benchPut(b, ports.WithFencingToken(b.Context(), 7)) }
