package rediskv

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// OpenTuned is Open with tune run on the client's options.
func OpenTuned(ctx context.Context, c Config, tune func(*redis.Options)) (*Store, error) {
	return open(ctx, c, tune)
}

// HoldConnection takes a connection from the store's pool, as a call in
// progress holds one, and returns the function that gives it back.
func (s *Store) HoldConnection(t *testing.T) func() {
	t.Helper()
	conn := s.rdb.Conn()
	if err := conn.Ping(t.Context()).Err(); err != nil {
		_ = conn.Close()
		t.Fatalf("take a connection of the pool: %v", err)
	}
	return func() { _ = conn.Close() }
}
