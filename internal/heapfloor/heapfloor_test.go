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
		name                 string
		live, scanned, floor uint64
		base, want           int
	}{
		{"a live heap an eighth of the floor grows sevenfold", 8 * mib, 8 * mib, 64 * mib, 100, 700},
		{"rounded up, so the goal is never short of the floor", 3 * mib, 3 * mib, 64 * mib, 100, 1600},
		{"stacks and globals count in the growth", 8 * mib, 16 * mib, 64 * mib, 100, 350},
		{"a tiny heap is held by the runtime's own minimum, scaled", 1, 1, 64 * mib, 100, 1600},
		{"a goal past the floor at the base keeps the base", 32 * mib, 32 * mib, 64 * mib, 100, 100},
		{"a heap past the floor keeps the base", 200 * mib, 210 * mib, 64 * mib, 100, 100},
		{"an operator's higher base stands", 16 * mib, 16 * mib, 64 * mib, 500, 500},
		{"no cycle yet reads as nothing live", 0, 0, 64 * mib, 100, 1600},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := percentFor(c.live, c.scanned, c.floor, c.base); got != c.want {
				t.Fatalf("percentFor(%d, %d, %d, %d) = %d, want %d", c.live, c.scanned, c.floor, c.base, got, c.want)
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

// The floor follows the heap across cycles, one after the other: raised
// over a small heap, the collector's own as the heap nears the floor, and
// raised again once the heap is small again.
func TestAFloorFollowsTheHeapFromCycleToCycle(t *testing.T) {
	base := gcPercent()
	f := Keep(16 * mib)
	defer f.Stop()
	var live []byte
	for round := range 3 {
		live = make([]byte, 12*mib)
		eventually(t, "the percent was not lowered to the base once the heap neared the floor", func() bool {
			return f.Percent() == base && gcPercent() == base
		})
		runtime.KeepAlive(live)
		live = nil
		eventually(t, "the percent was not raised again once the heap was small", func() bool {
			return f.Percent() > base && gcPercent() == f.Percent()
		})
		t.Logf("round %d: raised to %d", round, f.Percent())
	}
}

// One floor is kept per process: a second Keep changes nothing, and its
// Stop leaves the first one's percent alone.
func TestASecondFloorLeavesTheFirstAlone(t *testing.T) {
	base := gcPercent()
	first := Keep(64 * mib)
	defer first.Stop()
	raised := first.Percent()
	if raised == base {
		t.Fatalf("the first floor did not raise the percent: %d", base)
	}
	second := Keep(8 * mib)
	second.Stop()
	if got := gcPercent(); got != raised {
		t.Fatalf("a second floor's Stop set the percent to %d, want the first's %d", got, raised)
	}
	first.Stop()
	if got := gcPercent(); got != base {
		t.Fatalf("after the first floor's Stop the percent is %d, want %d", got, base)
	}
	third := Keep(64 * mib)
	defer third.Stop()
	if third.Percent() == base {
		t.Fatalf("a floor kept after the first stopped did not raise the percent")
	}
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
