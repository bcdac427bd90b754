// Package memory is a key-value store inside one process, bounded in bytes:
// the reference for the key-value contract.
package memory

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/internal/maxbytes"
	"github.com/abi-engine/engine/internal/expiry"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

var _ ports.KeyValue = (*Store)(nil)

// DefaultMaxBytes is the bound of a store whose configuration sets none.
const DefaultMaxBytes = 64 << 20

// EntryOverhead is what an entry counts against the bound besides its key
// and its value: no less than what the store holds on the heap for it, its
// entry in the map, its expiry and the allocations of its key and value
// (TestTheBoundCountsNoLessThanTheHeapTheStoreHolds), so that a flood of
// empty values is bounded too.
const EntryOverhead = 256

// Config is the adapter's block under services.keyvalue.config.
type Config struct {
	// MaxBytes bounds what the entries take: each counts its key, its
	// value and EntryOverhead. 0 is DefaultMaxBytes.
	MaxBytes int64 `yaml:"max_bytes"`
}

// LocalStorage implements ports.StorageConfig: the data lives in this process.
func (Config) LocalStorage() string { return ports.InThisProcess }

// Default fills in the bound a block left out, so that the resolved
// configuration shows the one the store keeps.
func (c *Config) Default(string) { c.MaxBytes = maxbytes.Default(c.MaxBytes, DefaultMaxBytes) }

// Check refuses a negative bound, naming it under key.
func (c Config) Check(key string) error { return maxbytes.Check(key, c.MaxBytes, DefaultMaxBytes) }

// entry is a key's value. It is never changed in place but for its place
// in the expiry heap.
type entry struct {
	key     string
	value   []byte
	expires time.Time // zero: never
	cost    int64     // what the entry counts against the bound
	at      int       // the entry's place in the expiry heap, -1 when it has no TTL
}

// live reports whether the entry has not expired at now. time.Now carries a
// monotonic reading, so expiry follows elapsed time, not wall-clock jumps.
func (e *entry) live(now time.Time) bool { return e.expires.IsZero() || now.Before(e.expires) }

// Store keeps the entries in a map, at most max bytes of them. Expired
// entries are judged on every read and removed when touched; the engine's
// sweep (ports.Expirer) removes the ones no call touches again, and a write
// that finds the store full first removes expired ones, the soonest
// expired first, until it fits: the expiry heap names them without a walk
// of the live ones. Unlike the cache, the store never drops a live key to
// make room: a write that does not fit is refused with
// ports.ErrStorageFull.
//
// A stored value is never changed in place, so values are copied outside
// the lock: a large one does not hold up the calls on other keys. The keys
// are kept in order beside the map (keyIndex), so that a page of ListKeys
// holds the lock for the keys it reads, not for every key of the store.
type Store struct {
	max int64

	mu      sync.Mutex
	entries map[string]*entry
	keys    keyIndex
	used    int64
	// expiring holds the entries with a TTL, the soonest to expire first.
	expiring expiry.Heap[*entry]
}

// New returns an empty store of DefaultMaxBytes.
func New() *Store { return &Store{max: DefaultMaxBytes, entries: map[string]*entry{}} }

// Open returns an empty store.
func Open(ctx context.Context, c Config) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := c.Check("keyvalue.config"); err != nil {
		return nil, err
	}
	c.Default("")
	s := New()
	s.max = c.MaxBytes
	return s, nil
}

// Close drops the data.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries = map[string]*entry{}
	s.keys = keyIndex{}
	s.expiring = nil
	s.used = 0
	return nil
}

// lookup returns the live entry under key, forgetting it if it expired.
// s.mu is held.
func (s *Store) lookup(key string, now time.Time) (*entry, bool) {
	e, ok := s.entries[key]
	if ok && !e.live(now) {
		s.remove(e)
		return nil, false
	}
	return e, ok
}

// remove forgets e. s.mu is held.
func (s *Store) remove(e *entry) {
	delete(s.entries, e.key)
	s.keys.remove(e.key)
	if e.at >= 0 {
		heap.Remove(&s.expiring, e.at)
	}
	s.used -= e.cost
}

// put stores e in place of what its key holds, unless the store has no
// room for it once the expired entries are gone: it removes them, the
// soonest expired first, until e fits or none is left. s.mu is held.
func (s *Store) put(e *entry, now time.Time) error {
	old := s.entries[e.key]
	var freed int64
	if old != nil {
		freed = old.cost
	}
	for s.used-freed+e.cost > s.max && len(s.expiring) > 0 && !s.expiring[0].live(now) {
		if s.expiring[0] == old {
			old, freed = nil, 0
		}
		s.remove(s.expiring[0])
	}
	if s.used-freed+e.cost > s.max {
		return fmt.Errorf("set %q: an entry of %d bytes (its key, its value and %d of upkeep) does not fit: the store holds %d of its max_bytes, %d: %w",
			e.key, e.cost, EntryOverhead, s.used, s.max, ports.ErrStorageFull)
	}
	if old != nil {
		if old.at >= 0 {
			heap.Remove(&s.expiring, old.at)
		}
		s.used -= old.cost
	} else {
		s.keys.insert(e.key)
	}
	s.entries[e.key] = e
	s.used += e.cost
	if !e.expires.IsZero() {
		heap.Push(&s.expiring, e)
	}
	return nil
}

// newEntry copies value into an entry for key, refusing one larger than
// the whole store. It takes no lock.
func (s *Store) newEntry(key string, value []byte, ttl time.Duration, now time.Time) (*entry, error) {
	n := int64(len(key)+len(value)) + EntryOverhead
	if n > s.max {
		return nil, fmt.Errorf("set %q: an entry of %d bytes (its key, its value and %d of upkeep) is more than the store's max_bytes, %d: %w",
			key, n, EntryOverhead, s.max, ports.ErrTooLarge)
	}
	e := &entry{key: key, value: slices.Clone(value), cost: n, at: -1}
	if e.value == nil {
		e.value = []byte{}
	}
	if ttl > 0 {
		e.expires = now.Add(ttl)
	}
	return e, nil
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
	var value []byte
	if found {
		value = e.value
	}
	s.mu.Unlock()
	if !found {
		return nil, true, fmt.Errorf("get %q: %w", key, ports.ErrNotFound)
	}
	if len(value) > most {
		return nil, false, nil
	}
	return slices.Clone(value), true, nil
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
	now := time.Now()
	e, err := s.newEntry(key, value, ttl, now)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.put(e, now)
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
	e, err := s.newEntry(key, value, ttl, now)
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.lookup(key, now); ok {
		return false, nil
	}
	if err := s.put(e, now); err != nil {
		return false, err
	}
	return true, nil
}

// Delete removes the key.
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	if err := check(ctx, key); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.lookup(key, time.Now())
	if ok {
		s.remove(e)
	}
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
	s.remove(e)
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

// listExpired is the most expired keys a ListKeys removes under one hold
// of the lock: it removes those it meets, and lets other calls in between
// batches of them, so that a page over a long run of expired keys does not
// hold up every call until it has removed them all.
const listExpired = expiry.Batch

// ListKeys reads a page from the ordered keys (keyIndex), under the lock
// for as long as it takes to read that page. A page is the keys as they
// stood at one moment, unless it met more than listExpired expired keys:
// it then reads on after a pause, and each key it lists was live during
// the call.
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
	// One key past the page says whether a live key follows it.
	l := lister{prefix: prefix, from: prefix, inclusive: true, want: limit + 1}
	if cursor >= prefix {
		l.from, l.inclusive = cursor, false
	}
	for !s.listBatch(&l) {
		if err := ctx.Err(); err != nil {
			return nil, "", err
		}
	}
	if len(l.keys) <= limit {
		return l.keys, "", nil
	}
	keys := l.keys[:limit]
	return keys, keys[limit-1], nil
}

// lister is where a ListKeys stands: the keys it has and where it reads on.
type lister struct {
	prefix    string
	from      string // the place to read on from
	inclusive bool   // from itself is still to be read
	want      int
	keys      []string
}

// listBatch reads l's keys on from where it stands, removing the expired
// ones it meets, until it has as many as it wants, has read every key with
// its prefix, or has met listExpired expired keys; it reports whether l is
// done.
func (s *Store) listBatch(l *lister) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now, done := time.Now(), true
	var expired []string
	s.keys.ascend(l.from, l.inclusive, func(k string) bool {
		if !strings.HasPrefix(k, l.prefix) {
			return false
		}
		if !s.entries[k].live(now) {
			expired = append(expired, k)
		} else {
			l.keys = append(l.keys, k)
		}
		l.from, l.inclusive = k, false
		if len(l.keys) == l.want {
			return false
		}
		if len(expired) == listExpired {
			done = false
			return false
		}
		return true
	})
	for _, k := range expired {
		s.remove(s.entries[k])
	}
	return done
}

var _ ports.Expirer = (*Store)(nil)

// DeleteExpired implements ports.Expirer. The expiry heap names the expired
// entries without a walk of the live ones; it removes them a batch at a
// time (expiry.Batch) so that calls go on during a sweep.
func (s *Store) DeleteExpired(ctx context.Context) (int, error) {
	return expiry.InBatches(ctx, s.deleteExpiredBatch)
}

// deleteExpiredBatch removes up to expiry.Batch expired entries.
func (s *Store) deleteExpiredBatch() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now, n := time.Now(), 0
	for n < expiry.Batch && len(s.expiring) > 0 && !s.expiring[0].live(now) {
		s.remove(s.expiring[0])
		n++
	}
	return n
}

// ExpiresAt and Place make an entry one expiry.Heap orders.
func (e *entry) ExpiresAt() time.Time { return e.expires }
func (e *entry) Place(at int)         { e.at = at }
