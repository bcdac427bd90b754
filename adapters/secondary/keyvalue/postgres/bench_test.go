package postgres_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/keyvalue/postgres"
	"github.com/abi-engine/engine/internal/pgtest"
	"github.com/abi-engine/engine/internal/testenv"
	"github.com/abi-engine/engine/ports"
)

// benchCallers is how many goroutines call at once, as in enginebench.
const benchCallers = 64

func openBench(b *testing.B) *postgres.Store {
	b.Helper()
	dsn := testenv.Lookup(b, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	store, err := postgres.Open(b.Context(), postgres.Config{DSN: dsn, Table: pgtest.Table(b, dsn, "kvbench")})
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
// context of its own, under token when it is not 0. Each call takes the
// next of the 1,000 keys, so calls at the same moment are on keys of their
// own, as enginebench's callers are. Had each goroutine counted its own
// way through the keys, they would have gone through them in step, and
// sets at the same moment would have been on one key: they queued on its
// row lock, and a set cost several times what it does on keys of its own.
func parallel(b *testing.B, token uint64, call func(ctx context.Context, i int) error) {
	b.Helper()
	b.SetParallelism(max(1, benchCallers/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	var next atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if token != 0 {
				ctx = ports.WithFencingToken(ctx, token)
			}
			err := call(ctx, int(next.Add(1)%1000))
			cancel()
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func benchGet(b *testing.B, token uint64) {
	store := openBench(b)
	if token != 0 {
		// The engine reads a key many times a term: keep each once first,
		// so that the first pass through the keys is not one of misses.
		ctx := ports.WithFencingToken(b.Context(), token)
		for i := range 1000 {
			if _, err := store.Get(ctx, fmt.Sprintf("bench/%d", i)); err != nil {
				b.Fatal(err)
			}
		}
	}
	parallel(b, token, func(ctx context.Context, i int) error {
		_, err := store.Get(ctx, fmt.Sprintf("bench/%d", i))
		return err
	})
}

func benchSet(b *testing.B, token uint64) {
	store := openBench(b)
	parallel(b, token, func(ctx context.Context, i int) error {
		return store.Set(ctx, fmt.Sprintf("bench/%d", i), []byte("0123456789abcdef"), 0)
	})
}

// BenchmarkGet reads a 16-byte value from 64 goroutines, with no term:
// every read is a query.
func BenchmarkGet(b *testing.B) { benchGet(b, 0) }

// BenchmarkGetUnderATerm reads as the engine does, under a serving term:
// after the first read of a key, the kept value answers.
func BenchmarkGetUnderATerm(b *testing.B) { benchGet(b, 1) }

// BenchmarkSet writes a 16-byte value from 64 goroutines, with no term.
func BenchmarkSet(b *testing.B) { benchSet(b, 0) }

// BenchmarkSetUnderATerm writes as the engine does: each batch of sets is
// checked against the fence.
func BenchmarkSetUnderATerm(b *testing.B) { benchSet(b, 1) }
