// Package keyvalue is a cache tier over the keyvalue service: entries are
// keys under a prefix in any ports.KeyValue, whose TTLs and SetIfAbsent
// carry the cache's. The tier is as shared as that store.
package keyvalue

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

// DefaultPrefix keeps cache entries apart from the store's other keys.
const DefaultPrefix = "cache/"

// Config is the keyvalue tier's block under services.cache.config.
type Config struct {
	// Prefix goes before every cache key in the store; DefaultPrefix when
	// empty.
	Prefix string `yaml:"prefix"`
	// Service is the keyvalue service's configuration, set by the
	// configuration layer: the tier keeps its data where that service does.
	Service ports.StorageConfig `yaml:"-"`
}

// LocalStorage implements ports.StorageConfig: the tier is local exactly
// when the keyvalue service is. Without the service's configuration it
// cannot tell, and says so rather than pass as shared.
func (c Config) LocalStorage() string {
	if c.Service == nil {
		return "keyvalue tier on the keyvalue service, whose storage is not configured"
	}
	where := c.Service.LocalStorage()
	if where == "" {
		return ""
	}
	return "keyvalue tier on the keyvalue service: " + where
}

// Store is a cache kept in a key-value store.
type Store struct {
	kv     ports.KeyValue
	prefix string
}

var _ ports.Cache = (*Store)(nil)

// Open checks the config and returns the tier over kv, which stays open
// when the tier closes: it belongs to the keyvalue service.
func Open(_ context.Context, c Config, kv ports.KeyValue) (*Store, error) {
	if kv == nil {
		return nil, fmt.Errorf("cache keyvalue tier: no keyvalue store: %w", ports.ErrInvalidArgument)
	}
	if err := c.Check("cache.config"); err != nil {
		return nil, err
	}
	return &Store{kv: kv, prefix: c.prefix()}, nil
}

// prefix is the configured prefix, or DefaultPrefix.
func (c Config) prefix() string {
	if c.Prefix == "" {
		return DefaultPrefix
	}
	return c.Prefix
}

// Check refuses a prefix no key could be stored under, naming it under
// key: the registry calls it when the configuration is built, before
// anything opens, and Open calls it too.
func (c Config) Check(key string) error {
	prefix := c.prefix()
	if err := storecheck.Key(key+".prefix", prefix); err != nil {
		return err
	}
	// A long key is stored under its hash after the prefix: that must fit
	// too, or every long key would be refused as if it were at fault.
	if most := storecheck.MaxKey - len("h:") - hex.EncodedLen(sha256.Size); len(prefix) > most {
		return fmt.Errorf("%s.prefix is %d bytes, more than the %d that leave room for a key's hash: %w", key, len(prefix), most, ports.ErrInvalidArgument)
	}
	return nil
}

// Close leaves the key-value store open.
func (s *Store) Close() error { return nil }

// storeKey maps a cache key to a store key. Keys that fit after the prefix
// keep their name, readable in the store; longer ones are hashed. The "k:"
// and "h:" marks keep the two forms from ever meeting.
func (s *Store) storeKey(key string) (string, error) {
	if err := storecheck.Key("cache key", key); err != nil {
		return "", err
	}
	if k := s.prefix + "k:" + key; len(k) <= storecheck.MaxKey {
		return k, nil
	}
	sum := sha256.Sum256([]byte(key))
	return s.prefix + "h:" + hex.EncodeToString(sum[:]), nil
}

// Get implements ports.Cache.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	k, err := s.storeKey(key)
	if err != nil {
		return nil, err
	}
	v, err := s.kv.Get(ctx, k)
	if err != nil {
		return nil, fmt.Errorf("cache get %q: %w", key, err)
	}
	return v, nil
}

// Set implements ports.Cache.
func (s *Store) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	k, err := s.storeKey(key)
	if err != nil {
		return err
	}
	if err := storecheck.TTL(ttl); err != nil {
		return err
	}
	if err := s.kv.Set(ctx, k, value, ttl); err != nil {
		return fmt.Errorf("cache set %q: %w", key, err)
	}
	return nil
}

// SetIfAbsent implements ports.Cache.
func (s *Store) SetIfAbsent(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error) {
	k, err := s.storeKey(key)
	if err != nil {
		return false, err
	}
	if err := storecheck.TTL(ttl); err != nil {
		return false, err
	}
	ok, err := s.kv.SetIfAbsent(ctx, k, value, ttl)
	if err != nil {
		return false, fmt.Errorf("cache set %q if absent: %w", key, err)
	}
	return ok, nil
}

// Delete implements ports.Cache.
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	k, err := s.storeKey(key)
	if err != nil {
		return false, err
	}
	ok, err := s.kv.Delete(ctx, k)
	if err != nil {
		return false, fmt.Errorf("cache delete %q: %w", key, err)
	}
	return ok, nil
}

// Exists implements ports.Cache.
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	k, err := s.storeKey(key)
	if err != nil {
		return false, err
	}
	ok, err := s.kv.Exists(ctx, k)
	if err != nil {
		return false, fmt.Errorf("cache exists %q: %w", key, err)
	}
	return ok, nil
}
