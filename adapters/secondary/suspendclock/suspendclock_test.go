package suspendclock_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/suspendclock"
)

// between reports, unless the clock read between before and after, moved
// on by no more than the suspended time.
func between(c *suspendclock.Clock, before, now, after time.Time) string {
	if now.Before(before) || now.Sub(after) > c.Suspended() {
		return fmt.Sprintf("the clock read %v, outside time.Now's %v to %v (suspended %v)", now, before, after, c.Suspended())
	}
	return ""
}

// Without a suspend the clock reads as time.Now, and it never goes back.
func TestTheClockFollowsGoTimeWhileNothingIsSuspended(t *testing.T) {
	c := suspendclock.New()
	prev := c.Now()
	for range 1000 {
		before := time.Now()
		now := c.Now()
		if e := between(c, before, now, time.Now()); e != "" {
			t.Fatal(e)
		}
		if now.Before(prev) {
			t.Fatalf("the clock went back from %v to %v", prev, now)
		}
		prev = now
	}
	if s := c.Suspended(); s < 0 || s > 50*time.Millisecond {
		t.Fatalf("Suspended = %v with no suspend", s)
	}
}

// Readers on many goroutines (every admitted call reads the clock) each
// see it go forward, and agree with time.Now.
func TestTheClockIsReadFromManyGoroutines(t *testing.T) {
	c := suspendclock.New()
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for range 8 {
		wg.Go(func() {
			prev := c.Now()
			for range 20000 {
				before := time.Now()
				now := c.Now()
				if now.Before(prev) {
					errs <- fmt.Sprintf("the clock went back from %v to %v", prev, now)
					return
				}
				if e := between(c, before, now, time.Now()); e != "" {
					errs <- e
					return
				}
				prev = now
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// What an admitted call pays for the clock (go test -bench . ./adapters/secondary/suspendclock/).
func BenchmarkNow(b *testing.B) {
	c := suspendclock.New()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = c.Now()
		}
	})
}

// What it paid when every reading read the suspended time.
func BenchmarkSuspendedRead(b *testing.B) {
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = suspendclock.ReadSuspended()
		}
	})
}
