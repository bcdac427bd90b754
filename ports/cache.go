package ports

import (
	"context"
	"time"
)

// Cache is a tier of short-lived values, kept in memory or over another
// store. Its methods mean what KeyValue's do.
type Cache interface {
	Get(ctx context.Context, key string) ([]byte, error)
	Set(ctx context.Context, key string, value []byte, ttl time.Duration) error
	SetIfAbsent(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error)
	Delete(ctx context.Context, key string) (bool, error)
	Exists(ctx context.Context, key string) (bool, error)
}
