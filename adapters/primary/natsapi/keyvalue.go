package natsapi

import (
	"context"
	"encoding/base64"
	"fmt"
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
			{Name: wire.KVSet, Handler: JSON(func(ctx context.Context, r kvWrite) (wire.Empty, error) {
				ttl, err := r.check(wire.KVSet)
				if err != nil {
					return wire.Empty{}, err
				}
				return wire.Empty{}, kv.Set(ctx, r.Key, r.Value.Bytes, ttl)
			})},
			get(kv),
			{Name: wire.KVSetIfAbsent, Handler: JSON(func(ctx context.Context, r kvWrite) (wire.Set, error) {
				ttl, err := r.check(wire.KVSetIfAbsent)
				if err != nil {
					return wire.Set{}, err
				}
				ok, err := kv.SetIfAbsent(ctx, r.Key, r.Value.Bytes, ttl)
				return wire.Set{Set: ok}, err
			})},
			{Name: wire.KVDelete, Handler: JSON(func(ctx context.Context, r wire.KVKey) (wire.Deleted, error) {
				ok, err := kv.Delete(ctx, r.Key)
				return wire.Deleted{Deleted: ok}, err
			})},
			{Name: wire.KVDeleteIfValue, Handler: JSON(func(ctx context.Context, r deleteIfValue) (wire.Deleted, error) {
				if !r.Value.given {
					return wire.Deleted{}, fmt.Errorf("%w: field \"value\" is missing: delete_if_value deletes only a key holding the value given", ports.ErrInvalidArgument)
				}
				ok, err := kv.DeleteIfValue(ctx, r.Key, r.Value.Bytes)
				return wire.Deleted{Deleted: ok}, err
			})},
			{Name: wire.KVExists, Handler: JSON(func(ctx context.Context, r wire.KVKey) (wire.Exists, error) {
				ok, err := kv.Exists(ctx, r.Key)
				return wire.Exists{Exists: ok}, err
			})},
			{Name: wire.KVListKeys, Handler: JSON(func(ctx context.Context, r wire.KVList) (wire.KVKeys, error) {
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
// body is left to Decode. It answers exactly as JSON would. A store that
// holds values in memory (ports.QuickGetter) answers from there at once
// when it can.
func get(kv ports.KeyValue) Endpoint {
	e := Endpoint{Name: wire.KVGet, Handler: func(ctx context.Context, call *Call) ([]byte, error) {
		key, err := getKey(call)
		if err != nil {
			return nil, err
		}
		return valueReply(kv.Get(ctx, key))
	}}
	if q, ok := kv.(ports.QuickGetter); ok {
		e.Quick = func(ctx context.Context, call *Call) ([]byte, bool, error) {
			key, err := getKey(call)
			if err != nil {
				return nil, true, err
			}
			v, ok, err := q.QuickGet(ctx, key)
			if !ok {
				return nil, false, nil
			}
			data, err := valueReply(v, err)
			return data, true, err
		}
	}
	return e
}

func getKey(call *Call) (string, error) {
	var r wire.KVKey
	if r.DecodeJSON(call.Data) {
		return r.Key, nil
	}
	var strict wire.KVKey
	if err := Decode(call.Data, &strict); err != nil {
		return "", err
	}
	return strict.Key, nil
}

func valueReply(v []byte, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	return wire.KVValue{Value: v}.AppendJSON(make([]byte, 0, len(`{"value":""}`)+base64.StdEncoding.EncodedLen(len(v)))), nil
}

// ttlOf reads ttl_seconds by the stores' rule: 0 keeps the value, else
// at least ports.MinTTL and at most ports.MaxTTL.
func ttlOf(seconds float64) (time.Duration, error) {
	return storecheck.TTLSeconds("ttl_seconds", seconds)
}

// deleteIfValue is wire.KVKeyValue as delete_if_value reads it: value must
// be given. Left out, it would be read as the empty value, and the call
// would delete a key holding "" although its caller named no value. null
// is the empty value, as every Go facade has sent it for a nil value.
type deleteIfValue struct {
	Key   string     `json:"key"`
	Value givenBytes `json:"value"`
}

// givenBytes is wire.Bytes that remembers whether it was given at all.
type givenBytes struct {
	wire.Bytes
	given bool
}

// UnmarshalJSON reads the value as wire.Bytes does, null included, and
// notes that it was given.
func (g *givenBytes) UnmarshalJSON(data []byte) error {
	g.given = true
	return g.Bytes.UnmarshalJSON(data)
}

// kvWrite is wire.KVWrite as set and set_if_absent read it, in keyvalue
// and cache alike: value must be given. Left out, it would be read as the
// empty value, and the call would store "" under the key although its
// caller named no value; no Go facade leaves it out, for every one writes
// a nil value as null, which is the empty value.
type kvWrite struct {
	Key        string       `json:"key"`
	Value      givenBytes   `json:"value"`
	TTLSeconds wire.Seconds `json:"ttl_seconds,omitempty" strictjson:"notnull"`
}

// DecodeJSON implements wire.FastDecoder with wire.KVWrite's hand reader,
// which takes only a body that gives value.
func (w *kvWrite) DecodeJSON(data []byte) bool {
	var fast wire.KVWrite
	if !fast.DecodeJSON(data) {
		return false
	}
	*w = kvWrite{Key: fast.Key, Value: givenBytes{Bytes: fast.Value, given: true}, TTLSeconds: fast.TTLSeconds}
	return true
}

// check refuses a write of op that names no value and reads its TTL.
func (w kvWrite) check(op string) (time.Duration, error) {
	if !w.Value.given {
		return 0, fmt.Errorf("%w: field \"value\" is missing: %s stores the value given; give \"\" (or null) for the empty value", ports.ErrInvalidArgument, op)
	}
	return ttlOf(float64(w.TTLSeconds))
}
