package jetstream

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
)

// OpenSweeping opens a store that sweeps the documents of dropped
// generations at Open and then every every.
func OpenSweeping(ctx context.Context, c Config, nc *nats.Conn, every time.Duration) (*Store, error) {
	return open(ctx, c, nc, every)
}
