package natsclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// KeyValue is the keyvalue service of the serving engine.
type KeyValue struct{ c *Client }

var _ ports.KeyValue = KeyValue{}

// NewKeyValue calls the keyvalue service through c.
func NewKeyValue(c *Client) KeyValue { return KeyValue{c: c} }

func kvSubject(op string) string { return wire.Subject(ports.ServiceKeyValue, op) }

// kvGet is the subject of the hottest call, built once.
var kvGet = kvSubject(wire.KVGet)

// Get implements ports.KeyValue. It writes and reads its bodies by hand
// rather than through Call, which takes them as interfaces, so that a get
// allocates as little as it can.
func (k KeyValue) Get(ctx context.Context, key string) ([]byte, error) {
	if err := text("key", key); err != nil {
		return nil, err
	}
	answer, err := k.c.exchange(ctx, kvGet, wire.KVKey{Key: key}.AppendJSON(make([]byte, 0, 16+len(key))))
	if err != nil {
		return nil, err
	}
	var out wire.KVValue
	if wire.Blank(answer) || !out.DecodeJSON(answer) {
		var lenient wire.KVValue
		if err := json.Unmarshal(answer, &lenient); err != nil {
			return nil, fmt.Errorf("%s: decode the answer: %w", kvGet, err)
		}
		out = lenient
	}
	return out.Value, nil
}

// Set implements ports.KeyValue.
func (k KeyValue) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if err := text("key", key); err != nil {
		return err
	}
	return k.c.Call(ctx, kvSubject(wire.KVSet), wire.KVWrite{Key: key, Value: wire.Bytes(value), TTLSeconds: wire.Seconds(ttl.Seconds())}, nil)
}

// SetIfAbsent implements ports.KeyValue.
func (k KeyValue) SetIfAbsent(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error) {
	if err := text("key", key); err != nil {
		return false, err
	}
	var out wire.Set
	err := k.c.Call(ctx, kvSubject(wire.KVSetIfAbsent), wire.KVWrite{Key: key, Value: wire.Bytes(value), TTLSeconds: wire.Seconds(ttl.Seconds())}, &out)
	return out.Set, err
}

// Delete implements ports.KeyValue.
func (k KeyValue) Delete(ctx context.Context, key string) (bool, error) {
	if err := text("key", key); err != nil {
		return false, err
	}
	var out wire.Deleted
	err := k.c.Call(ctx, kvSubject(wire.KVDelete), wire.KVKey{Key: key}, &out)
	return out.Deleted, err
}

// DeleteIfValue implements ports.KeyValue.
func (k KeyValue) DeleteIfValue(ctx context.Context, key string, value []byte) (bool, error) {
	if err := text("key", key); err != nil {
		return false, err
	}
	var out wire.Deleted
	err := k.c.Call(ctx, kvSubject(wire.KVDeleteIfValue), wire.KVKeyValue{Key: key, Value: wire.Bytes(value)}, &out)
	return out.Deleted, err
}

// Exists implements ports.KeyValue.
func (k KeyValue) Exists(ctx context.Context, key string) (bool, error) {
	if err := text("key", key); err != nil {
		return false, err
	}
	var out wire.Exists
	err := k.c.Call(ctx, kvSubject(wire.KVExists), wire.KVKey{Key: key}, &out)
	return out.Exists, err
}

// ListKeys implements ports.KeyValue.
func (k KeyValue) ListKeys(ctx context.Context, prefix string, limit int, cursor string) ([]string, string, error) {
	// JSON would carry invalid UTF-8 as U+FFFD, and the engine would list
	// from another cursor than the one given.
	if err := errors.Join(text("prefix", prefix), text("cursor", cursor)); err != nil {
		return nil, "", err
	}
	// The port reads any limit <= 0 as the default page; it is sent as 0,
	// the protocol's form of it.
	var out wire.KVKeys
	err := k.c.Call(ctx, kvSubject(wire.KVListKeys), wire.KVList{Prefix: prefix, Limit: max(limit, 0), Cursor: cursor}, &out)
	return out.Keys, out.Cursor, err
}
