package memory

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/abi-engine/engine/ports"
)

// BenchmarkALargeUpsertsHold upserts 50,000 vectors of dimension 384, each
// with a small payload, into a collection of 1,000, and reports the
// longest time the upsert held its collection's lock to publish the batch,
// which every search of the collection waits out: on the clock (hold-ms),
// and in CPU time of the thread that held it (hold-cpu-ms), which a loaded
// machine, running other work while the holder waits for a core, does not
// swell.
func BenchmarkALargeUpsertsHold(b *testing.B) {
	const dim, held, batch = 384, 1_000, 50_000
	r := rand.New(rand.NewPCG(1, 2))
	vectors := func(prefix string, n int) []ports.Vector {
		out := make([]ports.Vector, n)
		for i := range out {
			v := make([]float32, dim)
			for j := range v {
				v[j] = r.Float32()*2 - 1
			}
			out[i] = ports.Vector{ID: fmt.Sprintf("%s%d", prefix, i), Values: v, Payload: map[string]any{"kind": fmt.Sprint("k", i%10), "n": i}}
		}
		return out
	}
	base, large := vectors("h", held), vectors("b", batch)
	// The hooks run on the upserting goroutine, this one: locked to its
	// thread, the thread's CPU time is the upsert's.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	threadCPU := func() time.Duration {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ts.Nano())
	}
	var longest, longestCPU time.Duration
	for b.Loop() {
		b.StopTimer()
		s, err := Open(b.Context(), Config{})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.CreateCollection(b.Context(), "c", dim, ports.MetricCosine); err != nil {
			b.Fatal(err)
		}
		if err := s.Upsert(b.Context(), "c", base); err != nil {
			b.Fatal(err)
		}
		var start time.Time
		var startCPU time.Duration
		s.hooks.staged = func(string) { start, startCPU = time.Now(), threadCPU() }
		s.hooks.stored = func(string) {
			longest, longestCPU = max(longest, time.Since(start)), max(longestCPU, threadCPU()-startCPU)
		}
		b.StartTimer()
		if err := s.Upsert(b.Context(), "c", large); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		s.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(longest.Microseconds())/1000, "hold-ms")
	b.ReportMetric(float64(longestCPU.Microseconds())/1000, "hold-cpu-ms")
}
