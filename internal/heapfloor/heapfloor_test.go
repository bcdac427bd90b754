package heapfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

const mib = 1 << 20

func TestPercentFor(t *testing.T) {
	for _, c := range []struct {
		name        string
		live, floor uint64
		base, want  int
	}{
		{"a live heap an eighth of the floor grows sevenfold", 8 * mib, 64 * mib, 100, 700},
		{"rounded up, so the goal is never short of the floor", 3 * mib, 64 * mib, 100, 1600},
		{"a tiny heap is held by the runtime's own minimum, scaled", 1, 64 * mib, 100, 1600},
		{"half the floor or more keeps the base", 32 * mib, 64 * mib, 100, 100},
		{"a heap past the floor keeps the base", 200 * mib, 64 * mib, 100, 100},
		{"an operator's higher base stands", 16 * mib, 64 * mib, 500, 500},
		{"no cycle yet reads as nothing live", 0, 64 * mib, 100, 1600},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := percentFor(c.live, c.floor, c.base); got != c.want {
				t.Fatalf("percentFor(%d, %d, %d) = %d, want %d", c.live, c.floor, c.base, got, c.want)
			}
		})
	}
}

// gcPercent is the collector's percent as the runtime reports it.
func gcPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(int64(s[0].Value.Uint64()))
}

// eventually collects until ok holds, for up to ten seconds: the floor
// paces after a cycle's cleanups have run, a moment after the cycle.
func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("after ten seconds of collections: %s", what)
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}

func TestAFloorRaisesThePercentWhileTheHeapIsSmallAndLowersItAsTheHeapGrows(t *testing.T) {
	base := gcPercent()
	f := Keep(64 * mib)
	defer f.Stop()
	runtime.GC()
	eventually(t, "the percent was never raised over a small heap", func() bool {
		return f.Percent() > base && gcPercent() == f.Percent()
	})

	// A live heap of three quarters of a smaller floor leaves the base.
	f.Stop()
	f = Keep(8 * mib)
	defer f.Stop()
	live := make([]byte, 6*mib)
	eventually(t, "the percent was not lowered to the base once the heap neared the floor", func() bool {
		return f.Percent() == base && gcPercent() == base
	})
	runtime.KeepAlive(live)
}

func TestStopRestoresTheCollectorsPercent(t *testing.T) {
	base := gcPercent()
	f := Keep(64 * mib)
	if f.Percent() == base {
		t.Fatalf("the floor did not raise the percent at once: %d", base)
	}
	f.Stop()
	if got := gcPercent(); got != base {
		t.Fatalf("after Stop the percent is %d, want %d", got, base)
	}
	f.Stop() // a second Stop is harmless
	runtime.GC()
	runtime.GC()
	if got := gcPercent(); got != base {
		t.Fatalf("a cycle after Stop set the percent to %d, want %d", got, base)
	}
}

func TestACollectorSwitchedOffIsLeftOff(t *testing.T) {
	before := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(before)
	f := Keep(64 * mib)
	defer f.Stop()
	if got := gcPercent(); got != -1 {
		t.Fatalf("the floor switched the collector on: percent %d", got)
	}
	f.Stop()
	if got := gcPercent(); got != -1 {
		t.Fatalf("Stop switched the collector on: percent %d", got)
	}
}
