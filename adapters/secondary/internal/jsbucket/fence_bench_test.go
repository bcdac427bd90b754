package jsbucket

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// BenchmarkConditionalWrites measures a conditional write (a read of the
// key, then a Put at the revision read) on one single-replica server,
// unfenced and under one term's fencing token: by one caller alone, and
// by callers on two handles of one bucket racing on one key, where
// most writes are refused as conflicts.
func BenchmarkConditionalWrites(b *testing.B) {
	url := natstest.StartServer(b).ClientURL()
	var buckets atomic.Int64
	for _, fenced := range []bool{false, true} {
		for _, racing := range []bool{false, true} {
			name := fmt.Sprintf("fenced=%v/racing=%v", fenced, racing)
			b.Run(name, func(b *testing.B) {
				c := Config{Bucket: fmt.Sprintf("BENCH%d", buckets.Add(1))}
				handles := make([]*Bucket, 2)
				for i := range handles {
					var err error
					if handles[i], err = OpenFenced(b.Context(), natstest.Connect(b, url), c, "bench"); err != nil {
						b.Fatal(err)
					}
				}
				ctx := b.Context()
				if fenced {
					ctx = ports.WithFencingToken(ctx, 5)
					for _, h := range handles {
						if err := h.Fence(ctx); err != nil {
							b.Fatal(err)
						}
					}
				}
				var conflicts, handle atomic.Int64
				// write fails the benchmark with Error, not Fatal: it runs
				// on RunParallel's goroutines too.
				write := func(h *Bucket) {
					e, err := h.Last(ctx, "k")
					if err == nil {
						_, err = h.Put(ctx, "k", []byte("v"), 0, &e.Revision)
					}
					switch {
					case errors.Is(err, ErrConflict):
						conflicts.Add(1)
					case err != nil:
						b.Error(err)
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				if !racing {
					for b.Loop() {
						write(handles[0])
					}
					return
				}
				b.SetParallelism(2)
				b.RunParallel(func(pb *testing.PB) {
					h := handles[handle.Add(1)%2]
					for pb.Next() {
						write(h)
					}
				})
				b.ReportMetric(float64(conflicts.Load())/float64(b.N), "conflicts/op")
			})
		}
	}
}
