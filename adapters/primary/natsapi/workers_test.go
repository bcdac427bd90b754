package natsapi

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// Calls one after another run on one kept worker, not a goroutine each.
func TestWorkersKeepAGoroutineFromOneCallToTheNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorkers()
		ran := 0
		for range 100 {
			w.run(func() { ran++ })
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
// a worker of its own, and the count of workers follows the calls that run.
func TestWorkersRunCallsAtOnceWhileOthersBlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorkers()
		release := make(chan struct{})
		var started sync.WaitGroup
		for range 8 {
			started.Add(1)
			w.run(func() {
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
		// The eight wait now; the next eight calls take them, none is spawned.
		var done sync.WaitGroup
		for range 8 {
			done.Add(1)
			w.run(done.Done)
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
// stopped taking calls keeps no goroutines; one that was busy a moment ago
// is still there.
func TestWorkersEndWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorkers()
		release := make(chan struct{})
		for range 3 {
			w.run(func() { <-release })
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
	})
}
