package jsbucket

import (
	"context"
	"time"
)

// Sweeps runs sweep at once and then every every, each run within
// timeout, until closing ends, and closes done when it returns. A sweep
// that fails leaves what it did not do to the next.
func Sweeps(closing context.Context, every, timeout time.Duration, sweep func(context.Context) error, done chan<- struct{}) {
	defer close(done)
	for {
		ctx, cancel := context.WithTimeout(closing, timeout)
		_ = sweep(ctx)
		cancel()
		t := time.NewTimer(every)
		select {
		case <-closing.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
