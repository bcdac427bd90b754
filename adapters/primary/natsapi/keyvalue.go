package natsapi

import (
	"context"
	"time"

	"github.com/abi-engine/engine/internal/storecheck"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// KeyValue serves a ports.KeyValue as the keyvalue service.
func KeyValue(kv ports.KeyValue) Service {
	return Service{
		Name:        ports.ServiceKeyValue,
		Description: "abi-engine key-value store",
		Endpoints: []Endpoint{
			{wire.KVSet, JSON(func(ctx context.Context, r wire.KVWrite) (wire.Empty, error) {
				ttl, err := ttlOf(r.TTLSeconds)
				if err != nil {
					return wire.Empty{}, err
				}
				return wire.Empty{}, kv.Set(ctx, r.Key, r.Value, ttl)
			})},
			{wire.KVGet, JSON(func(ctx context.Context, r wire.KVKey) (wire.KVValue, error) {
				v, err := kv.Get(ctx, r.Key)
				return wire.KVValue{Value: v}, err
			})},
			{wire.KVSetIfAbsent, JSON(func(ctx context.Context, r wire.KVWrite) (wire.Set, error) {
				ttl, err := ttlOf(r.TTLSeconds)
				if err != nil {
					return wire.Set{}, err
				}
				ok, err := kv.SetIfAbsent(ctx, r.Key, r.Value, ttl)
				return wire.Set{Set: ok}, err
			})},
			{wire.KVDelete, JSON(func(ctx context.Context, r wire.KVKey) (wire.Deleted, error) {
				ok, err := kv.Delete(ctx, r.Key)
				return wire.Deleted{Deleted: ok}, err
			})},
			{wire.KVDeleteIfValue, JSON(func(ctx context.Context, r wire.KVKeyValue) (wire.Deleted, error) {
				ok, err := kv.DeleteIfValue(ctx, r.Key, r.Value)
				return wire.Deleted{Deleted: ok}, err
			})},
			{wire.KVExists, JSON(func(ctx context.Context, r wire.KVKey) (wire.Exists, error) {
				ok, err := kv.Exists(ctx, r.Key)
				return wire.Exists{Exists: ok}, err
			})},
			{wire.KVListKeys, JSON(func(ctx context.Context, r wire.KVList) (wire.KVKeys, error) {
				keys, next, err := kv.ListKeys(ctx, r.Prefix, r.Limit, r.Cursor)
				if keys == nil {
					keys = []string{}
				}
				return wire.KVKeys{Keys: keys, Cursor: next}, err
			})},
		},
	}
}

// ttlOf reads ttl_seconds by the stores' rule: 0 keeps the value, else
// at least storecheck.MinTTL and at most storecheck.MaxTTL.
func ttlOf(seconds float64) (time.Duration, error) {
	return storecheck.TTLSeconds("ttl_seconds", seconds)
}
