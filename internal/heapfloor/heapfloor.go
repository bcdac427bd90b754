// Package heapfloor keeps Go's garbage collector from running while the
// live heap is small.
//
// The collector starts a cycle when the heap has grown by GOGC percent of
// what the last cycle had to scan. An engine that serves small calls keeps
// about a megabyte live and allocates a kilobyte or more per call, so at
// the default of 100 it collects many times a second, and while a cycle
// marks, every allocation helps it and every pointer write pays the write
// barrier. A floor lets the heap grow to a fixed size before a cycle
// starts: after each cycle the percent is set so that the next one comes
// at the floor, and the collector's own setting is kept once that would
// bring the next cycle at the floor or later. A memory limit (GOMEMLIMIT)
// still makes the collector run sooner when memory runs short.
//
// One floor is kept per process: the collector's percent is the process's.
package heapfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// Default is the floor the engine keeps unless GOGC is set.
const Default = 64 << 20

// runtimeMinimum is the heap at which the runtime starts a cycle at
// GOGC=100 however little is live. The runtime scales it by the percent,
// so a percent above floor/runtimeMinimum*100 would put the cycles of a
// tiny heap beyond the floor.
const runtimeMinimum = 4 << 20

// kept is set while a floor is kept in this process.
var kept atomic.Bool

// Floor is a floor being kept. Stop gives the collector its own setting
// back.
type Floor struct {
	bytes uint64
	base  int // the collector's percent when the floor began

	cycle   chan struct{} // a collection has ended
	quit    chan struct{}
	done    chan struct{}
	stopped atomic.Bool  // set by the first Stop, or from the start when there is nothing to pace
	percent atomic.Int64 // the percent last set
	samples []metrics.Sample
}

// The samples pace reads, in this order.
var sampled = []string{
	"/gc/heap/live:bytes",
	"/gc/scan/stack:bytes",
	"/gc/scan/globals:bytes",
	"/gc/gogc:percent",
}

// Keep keeps the heap's goal at least bytes until Stop. The collector's
// percent when it is called is the least it sets. A collector switched
// off (GOGC=off) is left alone, and so is one whose floor another Keep in
// this process keeps: that Keep's floor changes nothing.
func Keep(bytes uint64) *Floor {
	f := &Floor{
		bytes: bytes,
		cycle: make(chan struct{}, 1),
		quit:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	for _, name := range sampled {
		f.samples = append(f.samples, metrics.Sample{Name: name})
	}
	metrics.Read(f.samples)
	if v := f.samples[3].Value; v.Kind() == metrics.KindUint64 {
		f.base = int(int64(v.Uint64())) // GOGC=off reads as -1
	}
	f.percent.Store(int64(f.base))
	if f.base <= 0 || !kept.CompareAndSwap(false, true) {
		// The collector is off, or unknown, or paced already.
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
	if f.stopped.Swap(true) {
		return // stopped already, or never started
	}
	close(f.quit)
	<-f.done
	debug.SetGCPercent(f.base)
	f.percent.Store(int64(f.base))
	kept.Store(false)
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

// pace sets the percent for what the last cycle found.
func (f *Floor) pace() {
	metrics.Read(f.samples)
	v := func(i int) uint64 { return f.samples[i].Value.Uint64() }
	p := percentFor(v(0), v(0)+v(1)+v(2), f.bytes, f.base)
	if int64(p) != f.percent.Load() {
		debug.SetGCPercent(p)
		f.percent.Store(int64(p))
	}
}

// percentFor is the least percent at which the runtime's goal reaches
// floor, never less than base, and never so much that the runtime's
// minimum heap outgrows the floor. The goal is the live heap plus the
// percent of what a cycle scans: the live heap, goroutine stacks and
// globals (runtime/mgcpacer.go).
func percentFor(live, scanned, floor uint64, base int) int {
	scanned = max(scanned, live, 1)
	if live >= floor {
		return base
	}
	p := ((floor-live)*100 + scanned - 1) / scanned
	return int(max(min(p, floor*100/runtimeMinimum), uint64(base)))
}
