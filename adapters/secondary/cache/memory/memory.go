// Package memory is a cache in this process, bounded in bytes. A full
// cache makes room for a new entry by dropping expired entries first, the
// soonest expired first, and then the least recently used live ones. The
// engine's sweep (ports.Expirer) reclaims every expired entry, whether or
// not a call meets it again.
package memory

import (
	"bytes"
	"container/heap"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/internal/maxbytes"
	"github.com/abi-engine/engine/internal/expiry"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

// DefaultMaxBytes is the bound of a cache whose configuration sets none.
const DefaultMaxBytes = 64 << 20

// EntryOverhead is what an entry counts against the bound besides its key
// and its value: no less than what the map, the recency list, the expiry
// heap and the allocations of its key and value hold for it on the heap
// (TestTheBoundCountsNoLessThanTheHeapTheStoreHolds), so that a flood of
// empty values is bounded too.
const EntryOverhead = 256

// Config is the memory cache's block under services.cache.config.
type Config struct {
	// MaxBytes bounds what the entries take: each counts its key, its
	// value and EntryOverhead. 0 is DefaultMaxBytes.
	MaxBytes int64 `yaml:"max_bytes"`
}

// LocalStorage implements ports.StorageConfig: the entries live in this
// process only.
func (Config) LocalStorage() string { return ports.InThisProcess }

// Default fills in the bound a block left out, so that the resolved
// configuration shows the one the cache keeps.
func (c *Config) Default(string) { c.MaxBytes = maxbytes.Default(c.MaxBytes, DefaultMaxBytes) }

// Check refuses a negative bound, naming it under key.
func (c Config) Check(key string) error { return maxbytes.Check(key, c.MaxBytes, DefaultMaxBytes) }

// Store is a cache in memory. It is safe for concurrent use.
//
// A stored value is never changed in place, so values are copied outside
// the lock: a large one does not hold up the calls on other keys. Nor does
// the room a large one needs: a set evicts at most expiry.Batch entries
// under one hold of the lock (see put).
type Store struct {
	max int64

	// evicting is held by the one set that makes its room over several
	// holds of mu, so that the room it frees is claimed by one set only.
	evicting sync.Mutex

	mu sync.Mutex
	// used counts the entries and claimed: it is never more than max.
	used int64
	// claimed is what the set holding evicting has freed for its entry
	// so far; no other set may take it.
	claimed int64
	entries map[string]*entry
	// recent is the sentinel of a ring of the entries, the most recently
	// used next after it and the least recently used before it.
	recent entry
	// expiring holds the entries with a TTL, the soonest to expire first.
	expiring expiry.Heap[*entry]
	// kept is the entry that the set making its room (holding
	// evicting) replaces, or nil: it stays readable until the new one is
	// in, and counts as used, but is out of the recency ring and the
	// expiry heap, so that no eviction drops it.
	kept *entry

	// hooks are points where tests stop a set; nil outside tests.
	hooks struct {
		// evicted is called, mu not held, after a set that makes its
		// room over several holds of the lock has evicted one batch.
		evicted func()
	}
}

type entry struct {
	key   string
	value []byte
	// expires is zero for an entry without a TTL.
	expires    time.Time
	prev, next *entry
	// at is the entry's place in the expiry heap, -1 when it has no TTL.
	at int
}

func (e *entry) expired(now time.Time) bool {
	return !e.expires.IsZero() && !now.Before(e.expires)
}

func (e *entry) cost() int64 { return int64(len(e.key) + len(e.value) + EntryOverhead) }

var (
	_ ports.Cache   = (*Store)(nil)
	_ ports.Expirer = (*Store)(nil)
)

// Open returns an empty cache.
func Open(_ context.Context, c Config) (*Store, error) {
	if err := c.Check("cache.config"); err != nil {
		return nil, err
	}
	c.Default("")
	s := &Store{max: c.MaxBytes}
	s.reset()
	return s, nil
}

// reset empties the cache; the caller holds the lock, or has the only
// reference.
func (s *Store) reset() {
	s.entries = make(map[string]*entry)
	s.recent.prev, s.recent.next = &s.recent, &s.recent
	s.expiring = nil
	s.kept = nil
	s.used = s.claimed
}

// Close drops every entry.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reset()
	return nil
}

// remove drops e; the caller holds the lock.
func (s *Store) remove(e *entry) {
	delete(s.entries, e.key)
	s.unlink(e)
	if e == s.kept {
		s.kept = nil
	}
	s.used -= e.cost()
}

// unlink takes e out of the recency ring and the expiry heap, leaving it
// linked to itself, so that unlinking it again changes nothing; the caller
// holds the lock.
func (s *Store) unlink(e *entry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = e, e
	if e.at >= 0 {
		heap.Remove(&s.expiring, e.at)
	}
}

// relink gives an unlinked e back to the ring, as the most recently used,
// and to the expiry heap; the caller holds the lock.
func (s *Store) relink(e *entry) {
	s.pushFront(e)
	if !e.expires.IsZero() {
		heap.Push(&s.expiring, e)
	}
}

// keptCost is what the entry set aside counts as used, 0 when none is.
func (s *Store) keptCost() int64 {
	if s.kept == nil {
		return 0
	}
	return s.kept.cost()
}

// use makes e the most recently used entry; the caller holds the lock.
func (s *Store) use(e *entry) {
	e.prev.next, e.next.prev = e.next, e.prev
	s.pushFront(e)
}

func (s *Store) pushFront(e *entry) {
	e.prev, e.next = &s.recent, s.recent.next
	e.prev.next, e.next.prev = e, e
}

// live returns key's entry, made the most recently used, unless it is
// missing or expired; the caller holds the lock.
func (s *Store) live(key string) *entry {
	e, ok := s.entries[key]
	if !ok {
		return nil
	}
	if e.expired(time.Now()) {
		s.remove(e)
		return nil
	}
	if e != s.kept {
		s.use(e)
	}
	return e
}

// newEntry copies value into an entry for key, refusing one larger than
// the whole cache. It takes no lock.
func (s *Store) newEntry(key string, value []byte, ttl time.Duration) (*entry, error) {
	e := &entry{key: key, at: -1}
	if n := int64(len(key)+len(value)) + EntryOverhead; n > s.max {
		return nil, fmt.Errorf("cache set %q: an entry of %d bytes (its key, its value and %d of upkeep) is more than the cache's max_bytes, %d: %w",
			key, n, EntryOverhead, s.max, ports.ErrTooLarge)
	}
	e.value = bytes.Clone(value)
	if ttl > 0 {
		e.expires = time.Now().Add(ttl)
	}
	return e, nil
}

// put stores e in place of any entry of its key, making room for it: first
// by dropping expired entries, the soonest expired first, then the least
// recently used. With ifAbsent it stores nothing, and reports false, when
// the key holds a live entry. newEntry has checked that e fits in an empty
// cache.
//
// Room that one hold of the lock cannot make, evicting expiry.Batch
// entries, is made a batch at a time, releasing the lock between batches,
// so that a set of a value as large as the cache, which may evict half a
// million small entries, does not hold up every other call while it does.
// The room freed meanwhile is claimed for e, so calls in between cannot
// take it, and counts as used, so the entries with it never pass max.
// The entry e replaces is set aside meanwhile (Store.kept): a get of the
// key finds it until e is in, and no eviction drops it.
func (s *Store) put(e *entry, ifAbsent bool) bool {
	s.mu.Lock()
	if ifAbsent && s.live(e.key) != nil {
		s.mu.Unlock()
		return false
	}
	// With ifAbsent, live has dropped an expired entry of the key. The
	// entry e replaces is taken out of the ring for this hold, so that
	// the eviction does not drop it before e is in; it may be the kept
	// one already.
	var room int64
	old := s.entries[e.key]
	if old != nil {
		room = old.cost()
		if old != s.kept {
			s.unlink(old)
		}
	}
	if s.evict(e.cost() - room) {
		if old != nil {
			s.remove(old)
		}
		s.insert(e)
		s.mu.Unlock()
		return true
	}
	if old != nil && old != s.kept {
		// Only the set holding evicting keeps an entry aside: one kept
		// while a set waits for its turn would be room the set making
		// its room could not free.
		s.relink(old)
	}
	s.mu.Unlock()

	s.evicting.Lock()
	defer s.evicting.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	// A call before the turn came may have stored the key, or dropped it.
	if old, ok := s.entries[e.key]; ok && !ifAbsent {
		s.unlink(old)
		s.kept = old
	}
	for {
		// The kept entry's room is e's once e replaces it; a delete of
		// the key between the batches makes e need more.
		need := e.cost() - s.keptCost() - s.claimed
		if need <= 0 {
			break
		}
		// What the cache holds beyond the claim and the kept entry is
		// entries it may evict, at least one of them while the claim
		// is short: e's cost is no more than max.
		s.evict(need)
		take := min(s.max-s.used, need)
		s.claimed += take
		s.used += take
		if take == need {
			break
		}
		s.mu.Unlock()
		if s.hooks.evicted != nil {
			s.hooks.evicted()
		}
		s.mu.Lock()
	}
	s.used -= s.claimed
	s.claimed = 0
	// A call between the batches may have stored the key.
	if old, ok := s.entries[e.key]; ok && old != s.kept {
		if ifAbsent && !old.expired(time.Now()) {
			return false
		}
		s.remove(old)
	}
	if s.kept != nil {
		s.remove(s.kept)
	}
	s.insert(e)
	return true
}

// evict drops up to expiry.Batch entries, expired ones first, the soonest
// expired first, then the least recently used, until need more bytes
// fit, and reports whether they do. The caller holds the lock.
func (s *Store) evict(need int64) bool {
	now := time.Now()
	for range expiry.Batch {
		if s.used+need <= s.max || s.recent.prev == &s.recent {
			break
		}
		if len(s.expiring) > 0 && s.expiring[0].expired(now) {
			s.remove(s.expiring[0])
			continue
		}
		s.remove(s.recent.prev)
	}
	return s.used+need <= s.max
}

// insert makes e the most recently used entry; the caller holds the lock
// and has made room for it.
func (s *Store) insert(e *entry) {
	s.entries[e.key] = e
	s.pushFront(e)
	if !e.expires.IsZero() {
		heap.Push(&s.expiring, e)
	}
	s.used += e.cost()
}

// Get implements ports.Cache.
func (s *Store) Get(_ context.Context, key string) ([]byte, error) {
	if err := storecheck.Key("cache key", key); err != nil {
		return nil, err
	}
	s.mu.Lock()
	e := s.live(key)
	s.mu.Unlock()
	if e == nil {
		return nil, fmt.Errorf("cache get %q: %w", key, ports.ErrNotFound)
	}
	return append([]byte{}, e.value...), nil
}

// Set implements ports.Cache.
func (s *Store) Set(_ context.Context, key string, value []byte, ttl time.Duration) error {
	if err := storecheck.Write("cache key", key, ttl); err != nil {
		return err
	}
	e, err := s.newEntry(key, value, ttl)
	if err != nil {
		return err
	}
	s.put(e, false)
	return nil
}

// SetIfAbsent implements ports.Cache.
func (s *Store) SetIfAbsent(_ context.Context, key string, value []byte, ttl time.Duration) (bool, error) {
	if err := storecheck.Write("cache key", key, ttl); err != nil {
		return false, err
	}
	e, err := s.newEntry(key, value, ttl)
	if err != nil {
		return false, err
	}
	return s.put(e, true), nil
}

// Delete implements ports.Cache.
func (s *Store) Delete(_ context.Context, key string) (bool, error) {
	if err := storecheck.Key("cache key", key); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.live(key)
	if e == nil {
		return false, nil
	}
	s.remove(e)
	return true, nil
}

// Exists implements ports.Cache. It uses the entry as Get does.
func (s *Store) Exists(_ context.Context, key string) (bool, error) {
	if err := storecheck.Key("cache key", key); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live(key) != nil, nil
}

// DeleteExpired implements ports.Expirer. The expiry heap names the expired
// entries without a walk of the live ones; it drops them a batch at a time
// (expiry.Batch) so that calls go on during a sweep.
func (s *Store) DeleteExpired(ctx context.Context) (int, error) {
	return expiry.InBatches(ctx, s.deleteExpiredBatch)
}

// deleteExpiredBatch drops up to expiry.Batch expired entries.
func (s *Store) deleteExpiredBatch() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now, n := time.Now(), 0
	for n < expiry.Batch && len(s.expiring) > 0 && s.expiring[0].expired(now) {
		s.remove(s.expiring[0])
		n++
	}
	return n
}

// ExpiresAt and Place make an entry one expiry.Heap orders.
func (e *entry) ExpiresAt() time.Time { return e.expires }
func (e *entry) Place(at int)         { e.at = at }
