package natsapi

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
)

// A wait ends when the calls in flight reach none, whether the waiter came
// before they did or not; a call that starts after that is another wait's.
func TestTheCounterWaitsForNoneInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c counter
		if err := c.wait(t.Context()); err != nil {
			t.Fatalf("wait with none in flight: %v", err)
		}
		c.add()
		c.add()
		ended := make(chan error, 1)
		go func() { ended <- c.wait(t.Context()) }()
		synctest.Wait()
		c.done()
		synctest.Wait()
		stillWaiting(t, ended)
		c.done()
		synctest.Wait()
		if err := <-ended; err != nil {
			t.Fatalf("wait: %v", err)
		}

		// Counted in and out with nobody waiting, and again with a waiter.
		c.add()
		c.done()
		c.add()
		go func() { ended <- c.wait(t.Context()) }()
		synctest.Wait()
		stillWaiting(t, ended)
		c.done()
		if err := <-ended; err != nil {
			t.Fatalf("wait: %v", err)
		}

		ctx, cancel := context.WithCancel(t.Context())
		c.add()
		go func() { ended <- c.wait(ctx) }()
		synctest.Wait()
		cancel()
		if err := <-ended; !errors.Is(err, context.Canceled) {
			t.Fatalf("a cancelled wait: %v, want context.Canceled", err)
		}
		c.done()
		if err := c.wait(t.Context()); err != nil || c.value() != 0 {
			t.Fatalf("after the last call: wait %v, %d in flight", err, c.value())
		}
	})
}

// stillWaiting fails the test if the wait has ended.
func stillWaiting(t *testing.T, ended <-chan error) {
	t.Helper()
	select {
	case err := <-ended:
		t.Fatalf("the wait ended (%v) with a call still in flight", err)
	default:
	}
}
