// Package heapfloor keeps Go's garbage collector from running while the
// live heap is small.
//
// The collector starts a cycle when the heap has grown by GOGC percent of
// what the last cycle found live. An engine that serves small calls keeps
// a few megabytes live and allocates a kilobyte or two per call, so at the
// default of 100 it collects many times a second, and every cycle pays to
// scan the stacks of the engine's workers whatever the heap holds. A floor
// lets the heap grow to a fixed size before a cycle starts: after each
// cycle the percent is raised so that the next one comes at the floor,
// and falls back to the collector's own setting once the live heap is
// half the floor or more. A memory limit (GOMEMLIMIT) still makes the
// collector run sooner when memory runs short.
package heapfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// Default is the floor the engine keeps unless GOGC is set.
const Default = 64 << 20

// runtimeMinimum is the heap at which the runtime starts its first cycle
// at GOGC=100. The runtime scales it by the percent, so a percent above
// floor/runtimeMinimum*100 would put the first cycles beyond the floor.
const runtimeMinimum = 4 << 20

// Floor is a floor being kept. Stop gives the collector its own setting
// back.
type Floor struct {
	bytes uint64
	base  int // the collector's percent when the floor began

	cycle   chan struct{} // a collection has ended
	quit    chan struct{}
	done    chan struct{}
	stopped atomic.Bool
	stop    sync.Once
	percent atomic.Int64 // the percent last set
	samples []metrics.Sample
}

// Keep keeps the heap's goal at least bytes until Stop. The collector's
// percent when it is called is the least it sets; a collector switched off
// (GOGC=off) is left alone.
func Keep(bytes uint64) *Floor {
	f := &Floor{
		bytes:   bytes,
		cycle:   make(chan struct{}, 1),
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
		samples: []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/gogc:percent"}},
	}
	metrics.Read(f.samples)
	if v := f.samples[1].Value; v.Kind() == metrics.KindUint64 {
		f.base = int(int64(v.Uint64())) // GOGC=off reads as -1
	}
	f.percent.Store(int64(f.base))
	if f.base <= 0 {
		// The collector is off, or unknown: nothing to pace.
		f.stopped.Store(true)
		close(f.done)
		return f
	}
	f.pace()
	f.arm()
	go f.run()
	return f
}

// Percent is the collector's percent as the floor last set it.
func (f *Floor) Percent() int { return int(f.percent.Load()) }

// Stop ends the floor and restores the collector's percent.
func (f *Floor) Stop() {
	f.stop.Do(func() {
		if f.stopped.Swap(true) {
			return // never started
		}
		close(f.quit)
		<-f.done
		debug.SetGCPercent(f.base)
		f.percent.Store(int64(f.base))
	})
}

// sentinel is garbage from its first cycle on; its cleanup says that a
// cycle has ended. It holds a pointer so that it is not packed with other
// small objects, which would keep it alive.
type sentinel struct{ _ *byte }

// arm asks to hear of the end of the next collection.
func (f *Floor) arm() {
	runtime.AddCleanup(&sentinel{}, func(f *Floor) {
		select {
		case f.cycle <- struct{}{}:
		default:
		}
		if !f.stopped.Load() {
			f.arm()
		}
	}, f)
}

func (f *Floor) run() {
	defer close(f.done)
	for {
		select {
		case <-f.quit:
			return
		case <-f.cycle:
			f.pace()
		}
	}
}

// pace sets the percent for the live heap the last cycle found.
func (f *Floor) pace() {
	metrics.Read(f.samples)
	p := percentFor(f.samples[0].Value.Uint64(), f.bytes, f.base)
	if int64(p) != f.percent.Load() {
		debug.SetGCPercent(p)
		f.percent.Store(int64(p))
	}
}

// percentFor is the least percent at which a heap of live bytes grows to
// floor before the next cycle, never less than base, and never so much
// that the runtime's minimum heap outgrows the floor.
func percentFor(live, floor uint64, base int) int {
	live = max(live, 1)
	if live >= floor {
		return base
	}
	p := ((floor-live)*100 + live - 1) / live
	return int(max(min(p, floor*100/runtimeMinimum), uint64(base)))
}
