// Package suspendclock is the clock a lease holder judges its deadline by:
// Go's clock plus the time the machine has spent suspended. Go's monotonic
// clock, and every timer, stands still while Linux is suspended, so a holder
// resumed after its lease expired would otherwise believe it still valid.
package suspendclock

import (
	"sync/atomic"
	"time"

	"github.com/abi-engine/engine/domain"
)

var _ domain.Clock = (*Clock)(nil)

// Clock reads time.Now plus the suspended time since New.
type Clock struct {
	base    time.Duration // suspended time before New
	highest atomic.Int64  // the most suspended time seen, so readings never go back
}

// New returns a clock that counts suspends from now on.
func New() *Clock { return &Clock{base: suspended()} }

// Now is time.Now moved on by every suspend since New.
func (c *Clock) Now() time.Time {
	now := time.Now()
	return now.Add(c.Suspended())
}

// Suspended is how long the machine has been suspended since New.
func (c *Clock) Suspended() time.Duration {
	d := int64(suspended() - c.base)
	for {
		seen := c.highest.Load()
		if d <= seen {
			return time.Duration(seen)
		}
		if c.highest.CompareAndSwap(seen, d) {
			return time.Duration(d)
		}
	}
}
