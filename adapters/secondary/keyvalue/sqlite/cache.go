package sqlite

import (
	"sync"
)

// readCache keeps the values a handle read during one serving term, so a
// repeated get costs a map lookup instead of a read transaction (which on
// a WAL file takes and gives back a shared-memory lock, a pair of system
// calls, besides the query).
//
// Why it may be trusted: within a term, one engine serves, and every write
// it makes goes through its one handle, which drops the key here. Another
// process on the same file writes under a term of its own. An older one
// is refused by the fence this handle raised, and saw standing at its
// term, before it kept anything (see Store.trust). A newer one begins
// only after this engine's term has ended: by its lease's clock, when it
// stops taking calls at all, or by its release, before which the engine
// ends the term here (Store.EndTerm), so that the calls it answers while
// it drains read the file. A term the fence shows to be over is ended
// here too. A write with no token, from a tool or a test on another
// handle, is not fenced and is not seen here until the next term; the
// engine never makes one.
//
// Reads and writes through this handle stay linearizable: a key being
// written is neither served from nor added to the cache, and a read that
// began before a write ended adds nothing (gen).
type readCache struct {
	mu      sync.RWMutex
	term    uint64 // the fencing token the entries were read under; 0: none yet
	ended   uint64 // every term up to this one is over: not served, not begun
	gen     uint64 // moves at the start and at the end of every write
	writing map[string]int
	items   map[string]cached
	bytes   int
	limit   int // the most bytes kept: cacheBytes, less in tests
}

type cached struct {
	value   []byte
	expires int64 // Unix nanoseconds, 0 for never
}

const (
	// cacheBytes bounds the values a handle keeps; past it, arbitrary
	// entries make room.
	cacheBytes = 32 << 20
	// cacheValueMax is the largest value kept: a larger one costs more to
	// copy than the read it would save.
	cacheValueMax = 16 << 10
	// entryOverhead is what an entry costs besides its key and value.
	entryOverhead = 64
)

func newReadCache(limit int) *readCache {
	return &readCache{writing: map[string]int{}, items: map[string]cached{}, limit: limit}
}

// get returns a copy of key's value if it was kept under term and is live
// at now.
func (c *readCache) get(term uint64, key string, now int64) ([]byte, bool) {
	c.mu.RLock()
	e, ok := c.items[key]
	current := c.live(term)
	c.mu.RUnlock()
	if !ok || !current || (e.expires != 0 && e.expires <= now) {
		return nil, false
	}
	return append(make([]byte, 0, len(e.value)), e.value...), true
}

// ticket returns the generation a read of key under term must find
// unchanged to keep what it read; ok is false when nothing it reads may
// be kept: term is not the cache's, or key is being written.
func (c *readCache) ticket(term uint64, key string) (gen uint64, ok bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.gen, c.live(term) && c.writing[key] == 0
}

// live reports whether term is the cache's and not over; the caller holds
// mu.
func (c *readCache) live(term uint64) bool { return c.term == term && term > c.ended }

// fill keeps value, read under term with ticket gen, unless a write began
// or ended since or the term moved on.
func (c *readCache) fill(term, gen uint64, key string, value []byte, expires int64) {
	if len(value) > cacheValueMax {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.live(term) || c.gen != gen {
		return
	}
	c.forget(key)
	size := entrySize(key, value)
	for k := range c.items {
		if c.bytes+size <= c.limit {
			break
		}
		c.forget(k)
	}
	c.items[key] = cached{value: append([]byte(nil), value...), expires: expires}
	c.bytes += size
}

// entrySize is what an entry counts against the cache's limit.
func entrySize(key string, value []byte) int { return len(key) + len(value) + entryOverhead }

// current reports whether term is the cache's and not over.
func (c *readCache) current(term uint64) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.live(term)
}

// begin starts term, newer than any the cache has held and not over, with
// nothing kept.
func (c *readCache) begin(term uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if term > c.term && term > c.ended {
		c.term = term
		c.empty()
	}
}

// endedAt is the newest term that is over.
func (c *readCache) endedAt() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.ended
}

// end ends every term up to term.
func (c *readCache) end(term uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if term > c.ended {
		c.ended = term
	}
	if c.term <= c.ended {
		c.empty()
	}
}

// empty forgets every entry; the caller holds mu.
func (c *readCache) empty() {
	c.gen++
	clear(c.items)
	c.bytes = 0
}

// writeStarts marks key as being written until the returned function runs,
// which the writer calls once the write has ended, whatever its outcome.
func (c *readCache) writeStarts(key string) (ended func()) {
	c.mu.Lock()
	c.writing[key]++
	c.drop(key)
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		if c.writing[key]--; c.writing[key] <= 0 {
			delete(c.writing, key)
		}
		c.drop(key)
		c.mu.Unlock()
	}
}

// drop forgets key and moves the generation on; the caller holds mu.
func (c *readCache) drop(key string) {
	c.gen++
	c.forget(key)
}

// forget removes key's entry and its size; the caller holds mu.
func (c *readCache) forget(key string) {
	if e, ok := c.items[key]; ok {
		delete(c.items, key)
		c.bytes -= entrySize(key, e.value)
	}
}
