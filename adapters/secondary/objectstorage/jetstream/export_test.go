package jetstream

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
)

// OpenSweeping opens a store whose sweeps, every every, take chunks no
// description names once they have found them unchanged for age on the
// clock now, and whose Puts fail when their chunks are more than stall
// apart on that clock.
func OpenSweeping(ctx context.Context, c Config, nc *nats.Conn, age, every, stall time.Duration, now func() time.Time) (*Store, error) {
	return open(ctx, c, nc, sweeping{age: age, every: every, stall: stall, now: now, after: time.After})
}

// OpenOnClock opens a store whose clock is now and whose waits on that
// clock are after's; its sweeps run only at Open.
func OpenOnClock(ctx context.Context, c Config, nc *nats.Conn, now func() time.Time, after func(time.Duration) <-chan time.Time) (*Store, error) {
	return open(ctx, c, nc, sweeping{age: 1000 * time.Hour, every: 1000 * time.Hour, stall: 15 * time.Minute, now: now, after: after})
}
