package natsapi

import (
	"sync/atomic"
	"time"
)

// workers runs admitted calls on goroutines kept from one call to the
// next. A fresh goroutine per call costs its creation and, on a call into
// a store, the growth of its stack from the minimum on every call (about a
// tenth of an engine's CPU on a keyvalue get); a kept one has grown
// already. A worker that finds no call for workerIdle ends.
//
// The pool adds no bound of its own: the host's slots bound the calls that
// run. A worker is spawned only when none waits, so there are at most as
// many as calls run at once, plus those that have just given their slot
// back and not yet come back for the next call: twice the slots at most.
type workers struct {
	tasks chan func()  // unbuffered: a send succeeds only to a waiting worker
	live  atomic.Int32 // workers running a call or waiting for one
}

// workerIdle is how long a worker waits for a call before it ends.
const workerIdle = 10 * time.Second

func newWorkers() *workers { return &workers{tasks: make(chan func())} }

// run runs f on a waiting worker, or on a new one when none waits.
func (w *workers) run(f func()) {
	select {
	case w.tasks <- f:
	default:
		w.live.Add(1)
		go w.work(f)
	}
}

func (w *workers) work(f func()) {
	defer w.live.Add(-1)
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		f()
		f = nil // let the call's memory go while the worker waits
		idle.Reset(workerIdle)
		select {
		case f = <-w.tasks:
		case <-idle.C:
			return
		}
	}
}
