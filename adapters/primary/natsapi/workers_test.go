package natsapi

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// slots stands for the host's: a call takes one before run, its worker
// gives it back.
type slots chan struct{}

// jobFunc runs a function as a worker's job.
type jobFunc func()

func (f jobFunc) run() { f() }

func (s slots) run(w *workers, f func()) {
	s <- struct{}{}
	w.run(jobFunc(f))
}

func (s slots) release() { <-s }

// Calls one after another run on one kept worker, not a goroutine each.
func TestWorkersKeepAGoroutineFromOneCallToTheNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := make(slots, 4)
		w := newWorkers(s.release)
		ran := 0
		for range 100 {
			s.run(w, func() { ran++ })
			synctest.Wait() // the worker is back waiting for the next call
		}
		if ran != 100 {
			t.Fatalf("%d of 100 calls ran", ran)
		}
		if n := w.live.Load(); n != 1 {
			t.Fatalf("%d workers for calls one after another, want 1", n)
		}
		time.Sleep(workerIdle) // the idle worker ends, and the bubble with it
	})
}

// A call never waits for another to end: while some block, the next gets
// a worker of its own; once they end, the next calls reuse them.
func TestWorkersRunCallsAtOnceWhileOthersBlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := make(slots, 8)
		w := newWorkers(s.release)
		release := make(chan struct{})
		var started sync.WaitGroup
		for range 8 {
			started.Add(1)
			s.run(w, func() {
				started.Done()
				<-release
			})
		}
		started.Wait() // every call runs though none has ended
		if n := w.live.Load(); n != 8 {
			t.Fatalf("%d workers for 8 blocked calls", n)
		}
		close(release)
		synctest.Wait()
		var done sync.WaitGroup
		for range 8 {
			done.Add(1)
			s.run(w, done.Done)
			synctest.Wait()
		}
		done.Wait()
		if n := w.live.Load(); n != 8 {
			t.Fatalf("%d workers after reuse, want the 8 kept", n)
		}
		time.Sleep(workerIdle)
	})
}

// A worker with nothing to do ends after workerIdle, so a host that has
// stopped taking calls keeps no goroutines; one busy a moment ago stays.
func TestWorkersEndWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := make(slots, 3)
		w := newWorkers(s.release)
		release := make(chan struct{})
		for range 3 {
			s.run(w, func() { <-release })
		}
		close(release)
		synctest.Wait()
		time.Sleep(workerIdle - time.Millisecond)
		synctest.Wait()
		if n := w.live.Load(); n != 3 {
			t.Fatalf("%d workers a moment before their idle time ends, want 3", n)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if n := w.live.Load(); n != 0 {
			t.Fatalf("%d workers still live after %v idle", n, workerIdle)
		}
		// A worker that has ended is not handed a call.
		ran := make(chan struct{})
		s.run(w, func() { close(ran) })
		<-ran
		time.Sleep(workerIdle)
	})
}

// There are never more workers than slots, however the goroutines are
// scheduled: a worker is listed idle before its slot is free again. Real
// goroutines on busy processors, as in an engine under load.
func TestWorkersNeverOutnumberTheSlots(t *testing.T) {
	for _, n := range []int{1, 4} {
		s := make(slots, n)
		w := newWorkers(s.release)
		stop := make(chan struct{})
		var burners sync.WaitGroup
		for range runtime.GOMAXPROCS(0) {
			burners.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
						runtime.Gosched()
					}
				}
			})
		}
		var most atomic.Int32
		var calls sync.WaitGroup
		for range 20000 {
			calls.Add(1)
			s.run(w, func() {
				defer calls.Done()
				if l := w.live.Load(); l > most.Load() {
					most.Store(l)
				}
			})
			if l := w.live.Load(); l > most.Load() {
				most.Store(l)
			}
		}
		calls.Wait()
		close(stop)
		burners.Wait()
		if m := most.Load(); m > int32(n) {
			t.Fatalf("%d workers live at once with %d slots", m, n)
		}
	}
}
