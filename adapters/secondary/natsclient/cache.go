package natsclient

import (
	"context"
	"time"

	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// Cache is the cache service of the serving engine.
type Cache struct{ c *Client }

var _ ports.Cache = Cache{}

// NewCache calls the cache service through c.
func NewCache(c *Client) Cache { return Cache{c: c} }

func cacheSubject(op string) string { return wire.Subject(ports.ServiceCache, op) }

// Get implements ports.Cache.
func (k Cache) Get(ctx context.Context, key string) ([]byte, error) {
	if err := text("key", key); err != nil {
		return nil, err
	}
	var out wire.KVValue
	err := k.c.Call(ctx, cacheSubject(wire.CacheGet), wire.KVKey{Key: key}, &out)
	return out.Value, err
}

// Set implements ports.Cache.
func (k Cache) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if err := text("key", key); err != nil {
		return err
	}
	return k.c.Call(ctx, cacheSubject(wire.CacheSet), wire.KVWrite{Key: key, Value: wire.Bytes(value), TTLSeconds: wire.Seconds(ttl.Seconds())}, nil)
}

// SetIfAbsent implements ports.Cache.
func (k Cache) SetIfAbsent(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error) {
	if err := text("key", key); err != nil {
		return false, err
	}
	var out wire.Set
	err := k.c.Call(ctx, cacheSubject(wire.CacheSetIfAbsent), wire.KVWrite{Key: key, Value: wire.Bytes(value), TTLSeconds: wire.Seconds(ttl.Seconds())}, &out)
	return out.Set, err
}

// Delete implements ports.Cache.
func (k Cache) Delete(ctx context.Context, key string) (bool, error) {
	if err := text("key", key); err != nil {
		return false, err
	}
	var out wire.Deleted
	err := k.c.Call(ctx, cacheSubject(wire.CacheDelete), wire.KVKey{Key: key}, &out)
	return out.Deleted, err
}

// Exists implements ports.Cache.
func (k Cache) Exists(ctx context.Context, key string) (bool, error) {
	if err := text("key", key); err != nil {
		return false, err
	}
	var out wire.Exists
	err := k.c.Call(ctx, cacheSubject(wire.CacheExists), wire.KVKey{Key: key}, &out)
	return out.Exists, err
}
