// Package memory is a key-value store inside one process: the reference for
// the key-value contract, and the store under the memory cache.
package memory

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/abi-engine/engine/internal/expiry"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

var _ ports.KeyValue = (*Store)(nil)

// Config is the adapter's block under services.keyvalue.config: it has no
// settings.
type Config struct{}

// LocalStorage implements ports.StorageConfig: the data lives in this process.
func (Config) LocalStorage() string { return ports.InThisProcess }

type entry struct {
	value   []byte
	expires time.Time // zero: never
}

// live reports whether the entry has not expired at now. time.Now carries a
// monotonic reading, so expiry follows elapsed time, not wall-clock jumps.
func (e entry) live(now time.Time) bool { return e.expires.IsZero() || now.Before(e.expires) }

// Store keeps the entries in a map. Expired entries are judged on every read
// and removed when touched; the engine's sweep (ports.Expirer) removes the
// ones no call touches again.
//
// A stored value is never changed in place, so values are copied outside
// the lock: a large one does not hold up the calls on other keys.
type Store struct {
	mu      sync.Mutex
	entries map[string]entry
}

// New returns an empty store.
func New() *Store { return &Store{entries: map[string]entry{}} }

// Open returns an empty store; it exists so the memory adapter has the shape
// of every other.
func Open(ctx context.Context, _ Config) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return New(), nil
}

// Close drops the data.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries = map[string]entry{}
	return nil
}

// lookup returns the live entry under key, forgetting it if it expired.
// s.mu is held.
func (s *Store) lookup(key string, now time.Time) (entry, bool) {
	e, ok := s.entries[key]
	if ok && !e.live(now) {
		delete(s.entries, key)
		return entry{}, false
	}
	return e, ok
}

func newEntry(value []byte, ttl time.Duration, now time.Time) entry {
	e := entry{value: slices.Clone(value)}
	if e.value == nil {
		e.value = []byte{}
	}
	if ttl > 0 {
		e.expires = now.Add(ttl)
	}
	return e
}

func check(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return storecheck.Key("key", key)
}

// Get returns a copy of the value.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := check(ctx, key); err != nil {
		return nil, err
	}
	v, _, err := s.read(key, math.MaxInt)
	return v, err
}

// read is a copy of key's live value if it has at most most bytes, ok
// false if it has more. The copy is made outside the lock.
func (s *Store) read(key string, most int) (v []byte, ok bool, err error) {
	s.mu.Lock()
	e, found := s.lookup(key, time.Now())
	s.mu.Unlock()
	if !found {
		return nil, true, fmt.Errorf("get %q: %w", key, ports.ErrNotFound)
	}
	if len(e.value) > most {
		return nil, false, nil
	}
	return slices.Clone(e.value), true, nil
}

var _ ports.QuickGetter = (*Store)(nil)

// quickMax is the largest value QuickGet answers: copying and encoding a
// larger one where the call arrives would hold up the calls behind it.
const quickMax = 16 << 10

// QuickGet is Get for values up to quickMax: every value is in memory.
func (s *Store) QuickGet(ctx context.Context, key string) ([]byte, bool, error) {
	if err := check(ctx, key); err != nil {
		return nil, true, err
	}
	return s.read(key, quickMax)
}

// Set stores a copy of the value.
func (s *Store) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if err := check(ctx, key); err != nil {
		return err
	}
	if err := storecheck.TTL(ttl); err != nil {
		return err
	}
	e := newEntry(value, ttl, time.Now())
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries[key] = e
	return nil
}

// SetIfAbsent stores a copy of the value unless the key holds a live one.
func (s *Store) SetIfAbsent(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error) {
	if err := check(ctx, key); err != nil {
		return false, err
	}
	if err := storecheck.TTL(ttl); err != nil {
		return false, err
	}
	now := time.Now()
	e := newEntry(value, ttl, now)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.lookup(key, now); ok {
		return false, nil
	}
	s.entries[key] = e
	return true, nil
}

// Delete removes the key.
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	if err := check(ctx, key); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.lookup(key, time.Now())
	delete(s.entries, key)
	return ok, nil
}

// DeleteIfValue removes the key if it holds value.
func (s *Store) DeleteIfValue(ctx context.Context, key string, value []byte) (bool, error) {
	if err := check(ctx, key); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.lookup(key, time.Now())
	if !ok || string(e.value) != string(value) {
		return false, nil
	}
	delete(s.entries, key)
	return true, nil
}

// Exists reports whether the key holds a live value.
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	if err := check(ctx, key); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.lookup(key, time.Now())
	return ok, nil
}

// ListKeys sorts the matching keys on every call: the store is meant for
// tests and small data, where that is cheaper than keeping an index.
func (s *Store) ListKeys(ctx context.Context, prefix string, limit int, cursor string) ([]string, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	if err := storecheck.Prefix("prefix", prefix); err != nil {
		return nil, "", err
	}
	if err := storecheck.Prefix("cursor", cursor); err != nil {
		return nil, "", err
	}
	limit, err := storecheck.Limit("limit", limit)
	if err != nil {
		return nil, "", err
	}
	s.mu.Lock()
	var keys []string
	now := time.Now()
	for k := range s.entries {
		if strings.HasPrefix(k, prefix) && k > cursor {
			if _, ok := s.lookup(k, now); ok {
				keys = append(keys, k)
			}
		}
	}
	s.mu.Unlock()
	slices.Sort(keys)
	if len(keys) <= limit {
		return keys, "", nil
	}
	keys = keys[:limit]
	return keys, keys[limit-1], nil
}

var _ ports.Expirer = (*Store)(nil)

// DeleteExpired implements ports.Expirer, a batch at a time so that calls
// go on during a sweep (expiry.Sweep).
func (s *Store) DeleteExpired(ctx context.Context) (int, error) {
	return expiry.Sweep(ctx, &s.mu, func() map[string]entry { return s.entries }, func(e entry, now time.Time) bool { return !e.live(now) })
}
