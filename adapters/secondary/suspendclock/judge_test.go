package suspendclock

import (
	"testing"
	"time"
)

// fakeSystem is the system's suspended time, set by the test, with a count
// of how often the clock read it.
type fakeSystem struct {
	suspended time.Duration
	reads     int
}

func (f *fakeSystem) read() time.Duration {
	f.reads++
	return f.suspended
}

func newFake(t *testing.T) (*Clock, *fakeSystem) {
	t.Helper()
	sys := &fakeSystem{suspended: time.Hour} // suspended before New: not counted
	c := newClock(sys.read, time.Now())
	sys.reads = 0
	return c, sys
}

// Between suspends the clock does not read the suspended time on every
// call: that read is two system calls, and every admitted call asks.
func TestTheSuspendedTimeIsReadOnlyAfterRefreshWhileTheClocksAgree(t *testing.T) {
	c, sys := newFake(t)
	step := int64(Refresh) / 100
	for mono := int64(0); mono < 10*int64(Refresh); mono += step {
		if got := c.judge(0, mono); got != 0 {
			t.Fatalf("suspended = %v at %v with no suspend", got, time.Duration(mono))
		}
	}
	if sys.reads < 9 || sys.reads > 11 {
		t.Fatalf("the suspended time was read %d times over ten refresh periods, want about 10", sys.reads)
	}
}

// A suspend moves the wall clock on and not the monotonic one: the first
// reading after it counts the suspend, without waiting for a refresh.
func TestASuspendIsCountedByTheFirstReadingAfterIt(t *testing.T) {
	for _, suspend := range []time.Duration{2 * Jump, 5 * time.Second, time.Hour} {
		c, sys := newFake(t)
		if got := c.judge(0, 1); got != 0 {
			t.Fatalf("suspended = %v before any suspend", got)
		}
		sys.suspended += suspend
		// A microsecond of monotonic time later, the wall clock is a
		// suspend ahead.
		if got := c.judge(int64(suspend), 1001); got != suspend {
			t.Fatalf("after a suspend of %v, suspended = %v", suspend, got)
		}
		if got := c.judge(int64(suspend), 2001); got != suspend {
			t.Fatalf("the reading after the suspend is %v, want %v", got, suspend)
		}
	}
}

// A step of the wall clock back as large as the suspend hides the jump;
// the refresh still finds the suspend within one period.
func TestASuspendHiddenByAStepOfTheWallClockIsFoundWithinARefresh(t *testing.T) {
	c, sys := newFake(t)
	if got := c.judge(0, 1); got != 0 {
		t.Fatalf("suspended = %v before any suspend", got)
	}
	sys.suspended += time.Minute
	mono := int64(1)
	for ; mono < 1+int64(Refresh); mono += int64(time.Millisecond) {
		if c.judge(0, mono) == time.Minute {
			return
		}
	}
	if got := c.judge(0, mono); got != time.Minute {
		t.Fatalf("a refresh after the hidden suspend reads %v, want a minute", got)
	}
}

// A step of the wall clock is read as a possible suspend (one more read),
// never as one: the suspended time comes from the system alone.
func TestAStepOfTheWallClockIsNotASuspend(t *testing.T) {
	c, sys := newFake(t)
	c.judge(0, 1)
	before := sys.reads
	if got := c.judge(int64(-time.Hour), 2); got != 0 {
		t.Fatalf("a wall clock stepped back an hour gives a suspended time of %v", got)
	}
	if got := c.judge(int64(time.Hour), 3); got != 0 {
		t.Fatalf("a wall clock stepped on an hour gives a suspended time of %v", got)
	}
	if sys.reads != before+2 {
		t.Fatalf("two steps of the wall clock made %d reads, want 2", sys.reads-before)
	}
}

// The clock never goes back: not when the system reports less than before,
// and not when a reader that raced leaves an older reading behind.
func TestTheSuspendedTimeNeverGoesBack(t *testing.T) {
	c, sys := newFake(t)
	sys.suspended += time.Minute
	if got := c.judge(int64(time.Minute), 1); got != time.Minute {
		t.Fatalf("suspended = %v, want a minute", got)
	}
	sys.suspended -= time.Second
	if got := c.judge(int64(time.Minute-time.Second), 2); got != time.Minute {
		t.Fatalf("after the system reported less, suspended = %v, want a minute", got)
	}
	// A reader that judged a time from before the suspend stores its
	// reading last.
	c.last.Store(&reading{skew: 0, mono: 0})
	if got := c.judge(0, 3); got != time.Minute {
		t.Fatalf("after an older reading was stored, suspended = %v, want a minute", got)
	}
}
