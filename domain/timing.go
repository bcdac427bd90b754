package domain

import (
	"fmt"
	"time"
)

// Timing sets the lease's clock. Every period is judged on the local
// monotonic clock; no two hosts' clocks are ever compared.
type Timing struct {
	// Lease is how long a contender waits, having seen no new revision,
	// before it treats the holder as dead. 1 s to 300 s.
	Lease time.Duration
	// StandbyTimeout is how long a standby waits for the lease before it
	// gives up, so a deploy that never stops the old engine is visible.
	StandbyTimeout time.Duration
	// Drain is how long a releasing engine keeps answering what it already
	// received. 0 closes at once.
	Drain time.Duration
}

// The bounds of Timing.Lease.
const (
	MinLease = time.Second
	MaxLease = 300 * time.Second
)

// DefaultTiming is the timing of a production deploy.
func DefaultTiming() Timing {
	return Timing{Lease: 20 * time.Second, StandbyTimeout: 900 * time.Second, Drain: 60 * time.Second}
}

// Validate names the first setting out of range by its configuration key.
func (t Timing) Validate() error {
	switch {
	case t.Lease < MinLease || t.Lease > MaxLease:
		return fmt.Errorf("%w: nats.engine.lease_seconds is %v, want %v to %v", ErrInvalidConfig, t.Lease.Seconds(), MinLease.Seconds(), MaxLease.Seconds())
	case t.StandbyTimeout <= 0:
		return fmt.Errorf("%w: nats.engine.standby_timeout_seconds is %v, want more than 0", ErrInvalidConfig, t.StandbyTimeout.Seconds())
	case t.Drain < 0:
		return fmt.Errorf("%w: nats.engine.drain_seconds is %v, want 0 or more", ErrInvalidConfig, t.Drain.Seconds())
	}
	return nil
}

// Renew is the renewal period, a quarter lease. Each renewal call is also cut
// off after it, so a hung call cannot delay fencing.
func (t Timing) Renew() time.Duration { return t.Lease / 4 }

// Fence is how long a holder serves after the start of its last successful
// renewal: half a lease, so it stops well before a contender, which waits a
// full lease, can take over.
func (t Timing) Fence() time.Duration { return t.Lease / 2 }

// Quarantine is how long whoever writes the key over a missing value (a
// contender, or the holder re-creating it) holds it before serving: a full
// lease, counted from when its write is known to have landed. An engine
// that held the lease before the key went stops half a lease after its last
// renewal, which started before that write landed; a full lease outlasts
// that even when the two clocks run at rates a factor of two apart, the
// margin a takeover of a silent holder has too.
func (t Timing) Quarantine() time.Duration { return t.Lease }
