// Package suspendclock is the clock a lease holder judges its deadline by:
// Go's clock plus the time the machine has spent suspended. Go's monotonic
// clock, and every timer, stands still while Linux is suspended, so a holder
// resumed after its lease expired would otherwise believe it still valid.
//
// Reading the suspended time takes two system calls, and every admitted call
// reads the clock. So the clock reads it again only when it could have
// changed: a suspend moves the wall clock on (CLOCK_REALTIME counts suspended
// time, the monotonic clock does not), and time.Now, a vDSO read, gives both.
// When the wall clock has moved away from the monotonic one by Jump or
// more since the last read, or Refresh of monotonic time has passed, the
// suspended time is read again before Now answers.
//
// Only Linux has the boot-time clock this reads (suspend_linux.go).
// Elsewhere (suspend_other.go) the suspended time is 0 and the deadline is
// judged on Go's monotonic clock alone, which on some systems (macOS among
// them) stands still while the machine sleeps: there a holder resumed after
// its lease expired may admit calls until it fails to renew, and only the
// fencing token keeps its writes out of the stores.
package suspendclock

import (
	"sync/atomic"
	"time"

	"github.com/abi-engine/engine/domain"
)

var _ domain.Clock = (*Clock)(nil)

const (
	// Jump is the least change of wall less monotonic time that makes the
	// clock read the suspended time again at once. A step of the wall
	// clock (NTP, an operator) does too, which costs only the read; NTP's
	// slew moves both clocks alike and does not.
	Jump = time.Millisecond
	// Refresh is the most monotonic time between two reads of the
	// suspended time, whatever the wall clock did: it bounds how long a
	// suspend hidden by an equal step of the wall clock back goes unseen.
	Refresh = 20 * time.Millisecond
)

// Clock reads time.Now plus the suspended time since New.
type Clock struct {
	suspended func() time.Duration // the system's suspended time since boot
	base      time.Duration        // suspended time before New
	start     time.Time            // wall and monotonic reading at New
	last      atomic.Pointer[reading]
	highest   atomic.Int64 // the most suspended time seen, so readings never go back
}

// reading is what the clock saw when it last read the suspended time.
type reading struct {
	skew int64 // wall less monotonic nanoseconds since start
	mono int64 // monotonic nanoseconds since start
}

// New returns a clock that counts suspends from now on.
func New() *Clock { return newClock(suspended, time.Now()) }

func newClock(source func() time.Duration, now time.Time) *Clock {
	c := &Clock{suspended: source, base: source(), start: now}
	c.last.Store(&reading{})
	return c
}

// ReadSuspended is the system's suspended time since boot, read as the
// clock reads it when it must: by system call.
func ReadSuspended() time.Duration { return suspended() }

// Now is time.Now moved on by every suspend since New.
func (c *Clock) Now() time.Time {
	now := time.Now()
	return now.Add(c.at(now))
}

// Suspended is how long the machine has been suspended since New.
func (c *Clock) Suspended() time.Duration { return c.at(time.Now()) }

// at is the suspended time as of now, a reading of time.Now that carries
// both clocks.
func (c *Clock) at(now time.Time) time.Duration {
	mono := int64(now.Sub(c.start))
	return c.judge(now.UnixNano()-c.start.UnixNano()-mono, mono)
}

// judge is the suspended time at a reading whose wall clock has moved skew
// nanoseconds away from its monotonic clock, mono nanoseconds after New.
func (c *Clock) judge(skew, mono int64) time.Duration {
	last := c.last.Load()
	if d := skew - last.skew; d < int64(Jump) && d > -int64(Jump) && mono >= last.mono && mono-last.mono < int64(Refresh) {
		// Readers that raced to read again may leave an older reading
		// behind; the highest suspended time is kept apart, so that only
		// costs another read, never a clock that goes back.
		return time.Duration(c.highest.Load())
	}
	s := c.raise(c.suspended() - c.base)
	c.last.Store(&reading{skew: skew, mono: mono})
	return s
}

// raise records d unless a larger suspended time was seen, and returns the
// larger.
func (c *Clock) raise(d time.Duration) time.Duration {
	for {
		seen := c.highest.Load()
		if int64(d) <= seen {
			return time.Duration(seen)
		}
		if c.highest.CompareAndSwap(seen, int64(d)) {
			return d
		}
	}
}
