package jsbucket

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/abi-engine/engine/internal/natstest"
)

// benchCallers runs call by callers goroutines at once on one bucket of a
// single-replica server, one connection for all of them: one caller calls
// in a loop, more share the loop's iterations through RunParallel.
func benchCallers(b *testing.B, prepare func(*Bucket), call func(*Bucket) error) {
	url := natstest.StartServer(b).ClientURL()
	var buckets atomic.Int64
	for _, callers := range []int{1, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			h, err := Open(b.Context(), natstest.Connect(b, url), Config{Bucket: fmt.Sprintf("CALLS%d", buckets.Add(1))}, "bench")
			if err != nil {
				b.Fatal(err)
			}
			prepare(h)
			b.ReportAllocs()
			b.ResetTimer()
			if callers == 1 {
				for b.Loop() {
					if err := call(h); err != nil {
						b.Fatal(err)
					}
				}
				return
			}
			// RunParallel starts parallelism × GOMAXPROCS goroutines.
			b.SetParallelism(max(1, callers/runtime.GOMAXPROCS(0)))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					// Error, not Fatal: this runs on RunParallel's goroutines.
					if err := call(h); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkGet measures a read of a key's last value from the stream's
// leader, by 1 caller and by 64 at once on one connection.
func BenchmarkGet(b *testing.B) {
	benchCallers(b, func(h *Bucket) {
		if _, err := h.Put(b.Context(), "k", []byte("v"), 0, nil); err != nil {
			b.Fatal(err)
		}
	}, func(h *Bucket) error {
		_, err := h.Last(b.Context(), "k")
		return err
	})
}

// BenchmarkSet measures a plain write of a key, by 1 caller and by 64 at
// once on one connection.
func BenchmarkSet(b *testing.B) {
	benchCallers(b, func(*Bucket) {}, func(h *Bucket) error {
		_, err := h.Put(b.Context(), "k", []byte("v"), 0, nil)
		return err
	})
}
