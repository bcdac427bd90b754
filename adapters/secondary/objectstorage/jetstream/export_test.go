package jetstream

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
)

// OpenSweeping opens a store whose sweeps take chunks no description names
// once their newest is age old, every every, and whose Puts fail when
// their chunks are more than stall apart on the clock now.
func OpenSweeping(ctx context.Context, c Config, nc *nats.Conn, age, every, stall time.Duration, now func() time.Time) (*Store, error) {
	return open(ctx, c, nc, sweeping{age: age, every: every, stall: stall, now: now})
}
