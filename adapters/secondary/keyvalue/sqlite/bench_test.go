package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/keyvalue/sqlite"
	"github.com/abi-engine/engine/ports"
)

// benchCallers is how many goroutines call at once, as in the kernel call
// benchmarks of natsclient.
const benchCallers = 64

func openBench(b *testing.B) *sqlite.Store {
	b.Helper()
	store, err := sqlite.Open(b.Context(), sqlite.Config{Path: filepath.Join(b.TempDir(), "kv.sqlite")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = store.Close() })
	for i := range 1000 {
		if err := store.Set(b.Context(), fmt.Sprintf("bench/%d", i), []byte("0123456789abcdef"), 0); err != nil {
			b.Fatal(err)
		}
	}
	return store
}

// parallel runs call from benchCallers goroutines, each call with a
// context that can be cancelled, as the host gives every call: such a
// context costs the driver more than context.Background would.
func parallel(b *testing.B, call func(ctx context.Context, i int) error) {
	b.Helper()
	b.SetParallelism(max(1, benchCallers/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := call(ctx, i%1000)
			cancel()
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkGet reads a 16-byte value from 64 goroutines.
func BenchmarkGet(b *testing.B) {
	store := openBench(b)
	parallel(b, func(ctx context.Context, i int) error {
		_, err := store.Get(ctx, fmt.Sprintf("bench/%d", i))
		return err
	})
}

// BenchmarkGetUnderATerm reads as the engine does, every call under the
// serving term's fencing token, so repeated reads come from the cache.
func BenchmarkGetUnderATerm(b *testing.B) {
	store := openBench(b)
	parallel(b, func(ctx context.Context, i int) error {
		_, err := store.Get(ports.WithFencingToken(ctx, 1), fmt.Sprintf("bench/%d", i))
		return err
	})
}

// BenchmarkSetUnderATerm writes as the engine does, each write checked
// against the fence in its statement.
func BenchmarkSetUnderATerm(b *testing.B) {
	store := openBench(b)
	parallel(b, func(ctx context.Context, i int) error {
		return store.Set(ports.WithFencingToken(ctx, 1), fmt.Sprintf("bench/%d", i), []byte("fedcba9876543210"), 0)
	})
}

// BenchmarkSet writes a 16-byte value from 64 goroutines.
func BenchmarkSet(b *testing.B) {
	store := openBench(b)
	parallel(b, func(ctx context.Context, i int) error {
		return store.Set(ctx, fmt.Sprintf("bench/%d", i), []byte("fedcba9876543210"), 0)
	})
}
