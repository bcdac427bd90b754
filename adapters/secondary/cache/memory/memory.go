// Package memory is a cache in this process. Expired entries are dropped
// when a call meets them, and by the engine's sweep (ports.Expirer), which
// finds the ones no call meets again.
package memory

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/abi-engine/engine/internal/expiry"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

// Config is the memory cache's configuration: it has no settings.
type Config struct{}

// LocalStorage implements ports.StorageConfig: the entries live in this
// process only.
func (Config) LocalStorage() string { return ports.InThisProcess }

// Store is a cache in memory. It is safe for concurrent use.
type Store struct {
	mu      sync.Mutex
	entries map[string]entry
}

type entry struct {
	value []byte
	// expires is zero for an entry without a TTL.
	expires time.Time
}

var (
	_ ports.Cache   = (*Store)(nil)
	_ ports.Expirer = (*Store)(nil)
)

// Open returns an empty cache.
func Open(_ context.Context, _ Config) (*Store, error) {
	return &Store{entries: make(map[string]entry)}, nil
}

// Close drops every entry.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.entries)
	return nil
}

// live returns key's entry unless it is missing or expired; the caller
// holds the lock.
func (s *Store) live(key string) (entry, bool) {
	e, ok := s.entries[key]
	if ok && !e.expires.IsZero() && !time.Now().Before(e.expires) {
		delete(s.entries, key)
		return entry{}, false
	}
	return e, ok
}

func newEntry(value []byte, ttl time.Duration) entry {
	e := entry{value: append([]byte{}, value...)}
	if ttl > 0 {
		e.expires = time.Now().Add(ttl)
	}
	return e
}

// Get implements ports.Cache.
func (s *Store) Get(_ context.Context, key string) ([]byte, error) {
	if err := storecheck.Key("cache key", key); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.live(key)
	if !ok {
		return nil, fmt.Errorf("cache get %q: %w", key, ports.ErrNotFound)
	}
	return append([]byte{}, e.value...), nil
}

// Set implements ports.Cache.
func (s *Store) Set(_ context.Context, key string, value []byte, ttl time.Duration) error {
	if err := storecheck.Write("cache key", key, ttl); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries[key] = newEntry(value, ttl)
	return nil
}

// SetIfAbsent implements ports.Cache.
func (s *Store) SetIfAbsent(_ context.Context, key string, value []byte, ttl time.Duration) (bool, error) {
	if err := storecheck.Write("cache key", key, ttl); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.live(key); ok {
		return false, nil
	}
	s.entries[key] = newEntry(value, ttl)
	return true, nil
}

// Delete implements ports.Cache.
func (s *Store) Delete(_ context.Context, key string) (bool, error) {
	if err := storecheck.Key("cache key", key); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.live(key)
	delete(s.entries, key)
	return ok, nil
}

// Exists implements ports.Cache.
func (s *Store) Exists(_ context.Context, key string) (bool, error) {
	if err := storecheck.Key("cache key", key); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.live(key)
	return ok, nil
}

// DeleteExpired implements ports.Expirer, a batch at a time so that calls
// go on during a sweep (expiry.Sweep).
func (s *Store) DeleteExpired(ctx context.Context) (int, error) {
	return expiry.Sweep(ctx, &s.mu, func() map[string]entry { return s.entries }, func(e entry, now time.Time) bool { return !e.expires.IsZero() && !now.Before(e.expires) })
}
