package natsapi

import (
	"context"

	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// Cache serves a ports.Cache as the cache service, with keyvalue's bodies.
func Cache(c ports.Cache) Service {
	return Service{
		Name:        ports.ServiceCache,
		Description: "abi-engine cache",
		Endpoints: []Endpoint{
			{Name: wire.CacheGet, Handler: JSON(func(ctx context.Context, r wire.KVKey) (wire.KVValue, error) {
				v, err := c.Get(ctx, r.Key)
				return wire.KVValue{Value: v}, err
			})},
			{Name: wire.CacheSet, Handler: JSON(func(ctx context.Context, r kvWrite) (wire.Empty, error) {
				ttl, err := r.check(wire.CacheSet)
				if err != nil {
					return wire.Empty{}, err
				}
				return wire.Empty{}, c.Set(ctx, r.Key, r.Value.Bytes, ttl)
			})},
			{Name: wire.CacheSetIfAbsent, Handler: JSON(func(ctx context.Context, r kvWrite) (wire.Set, error) {
				ttl, err := r.check(wire.CacheSetIfAbsent)
				if err != nil {
					return wire.Set{}, err
				}
				ok, err := c.SetIfAbsent(ctx, r.Key, r.Value.Bytes, ttl)
				return wire.Set{Set: ok}, err
			})},
			{Name: wire.CacheDelete, Handler: JSON(func(ctx context.Context, r wire.KVKey) (wire.Deleted, error) {
				ok, err := c.Delete(ctx, r.Key)
				return wire.Deleted{Deleted: ok}, err
			})},
			{Name: wire.CacheExists, Handler: JSON(func(ctx context.Context, r wire.KVKey) (wire.Exists, error) {
				ok, err := c.Exists(ctx, r.Key)
				return wire.Exists{Exists: ok}, err
			})},
		},
	}
}
