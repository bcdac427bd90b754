package suspendclock_test

import (
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/suspendclock"
)

// Without a suspend the clock reads as time.Now, and it never goes back.
func TestTheClockFollowsGoTimeWhileNothingIsSuspended(t *testing.T) {
	c := suspendclock.New()
	prev := c.Now()
	for range 1000 {
		before := time.Now()
		now := c.Now()
		if d := now.Sub(before); d < 0 || d > 50*time.Millisecond {
			t.Fatalf("the clock reads %v from time.Now with no suspend", d)
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
