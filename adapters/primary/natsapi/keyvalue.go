package natsapi

import (
	"context"
	"encoding/base64"
	"time"

	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
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
			{wire.KVGet, get(kv)},
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

// get is the hottest endpoint, written out rather than through JSON, which
// takes its bodies as interfaces: here they stay off the heap unless the
// body is left to Decode. It answers exactly as JSON would.
func get(kv ports.KeyValue) HandlerFunc {
	return func(ctx context.Context, call *Call) ([]byte, error) {
		var r wire.KVKey
		if !r.DecodeJSON(call.Data) {
			var strict wire.KVKey
			if err := Decode(call.Data, &strict); err != nil {
				return nil, err
			}
			r = strict
		}
		v, err := kv.Get(ctx, r.Key)
		if err != nil {
			return nil, err
		}
		return wire.KVValue{Value: v}.AppendJSON(make([]byte, 0, len(`{"value":""}`)+base64.StdEncoding.EncodedLen(len(v)))), nil
	}
}

// ttlOf reads ttl_seconds by the stores' rule: 0 keeps the value, else
// at least ports.MinTTL and at most ports.MaxTTL.
func ttlOf(seconds float64) (time.Duration, error) {
	return storecheck.TTLSeconds("ttl_seconds", seconds)
}
