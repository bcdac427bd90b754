package natsapi

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// workers runs admitted calls on goroutines kept from one call to the
// next. A fresh goroutine per call costs its creation and, on a call into
// a store, the growth of its stack from the minimum on every call (about a
// tenth of an engine's CPU on a keyvalue get); a kept one has grown
// already. A worker that finds no call for workerIdle ends.
//
// Each call holds one of the host's slots, and its worker gives the slot
// back (release) only once it is listed idle. So whoever takes a slot
// finds a worker listed unless every worker holds a slot: there are never
// more workers than slots, besides those leaving after their idle time.
type workers struct {
	release func() // gives back the slot of a call that has ended

	mu   sync.Mutex
	idle []*worker // waiting for a call, the most recently busy last

	live atomic.Int32 // workers running a call or waiting for one
}

type worker struct {
	calls chan job // the next call, handed over by run
}

// A job is what a worker runs: an admitted call (received).
type job interface{ run() }

// workerIdle is how long a worker waits for a call before it ends.
const workerIdle = 10 * time.Second

func newWorkers(release func()) *workers { return &workers{release: release} }

// run runs f, whose caller holds a slot, on the worker idle the shortest
// time, or on a new one when none is idle. It never waits for a call.
func (w *workers) run(f job) {
	w.mu.Lock()
	if n := len(w.idle); n > 0 {
		k := w.idle[n-1]
		w.idle[n-1] = nil
		w.idle = w.idle[:n-1]
		w.mu.Unlock()
		k.calls <- f // buffered: the worker takes it when it comes to it
		return
	}
	w.mu.Unlock()
	w.live.Add(1)
	go w.work(&worker{calls: make(chan job, 1)}, f)
}

func (w *workers) work(k *worker, f job) {
	defer w.live.Add(-1)
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		f.run()
		f = nil // let the call's memory go while the worker waits
		w.mu.Lock()
		w.idle = append(w.idle, k)
		w.mu.Unlock()
		w.release()
		idle.Reset(workerIdle)
		select {
		case f = <-k.calls:
		case <-idle.C:
			w.mu.Lock()
			if i := slices.Index(w.idle, k); i >= 0 {
				w.idle = slices.Delete(w.idle, i, i+1)
				w.mu.Unlock()
				return
			}
			w.mu.Unlock()
			f = <-k.calls // run took this worker as its time ran out
		}
	}
}
