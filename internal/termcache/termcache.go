// Package termcache keeps the values a keyvalue store read during one
// serving term, so that a repeated get costs a map lookup instead of a
// read from the backend. The SQLite and PostgreSQL keyvalue stores use it;
// ADR 0011 gives the design and the reasons.
//
// Why it may be trusted: within a term, one engine serves, and every write
// it makes goes through its one store handle, which drops the key here.
// Another engine writes under a term of its own. An older one is refused
// by the backend's fence, which this handle raised, and saw standing at
// its term, before it kept anything (Cache.Trust). A newer one begins only
// after this engine's term has ended: by its lease's clock, when it stops
// taking calls at all, or by its release, before which the engine ends the
// term here (Cache.End, through ports.TermEnder), so that the calls it
// answers while it drains read the backend. A term the fence shows to be
// over is ended here too. A write with no token, from a tool or a test on
// another handle, is not fenced and is not seen here until the next term;
// the engine never makes one.
//
// Reads and writes through one handle stay linearizable: a key being
// written is neither served from nor added to the cache, and a read that
// began before a write ended adds nothing (the generation a Ticket names).
package termcache

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/abi-engine/engine/ports"
)

// Cache is what one store handle keeps for its current term.
type Cache struct {
	mu      sync.RWMutex
	term    uint64 // the fencing token the entries were read under; 0: none yet
	ended   uint64 // every term up to this one is over: not served, not begun
	gen     uint64 // moves at the start and at the end of every write
	writing map[string]int
	items   map[string]cached
	bytes   int
	limit   int // the most bytes kept

	termMu sync.Mutex // one read at a time raises the fence for a new term
	// failedAt is when raising the fence for a term last failed, for a
	// reason other than a newer term (a full disk, a read-only file, a
	// lost connection), in Unix nanoseconds: reads wait RaiseRetry before
	// they try again.
	failedAt atomic.Int64
}

type cached struct {
	value   []byte
	expires int64 // on the store's clock, 0 for never
}

const (
	// Bytes bounds the values a handle keeps; past it, arbitrary entries
	// make room.
	Bytes = 32 << 20
	// ValueMax is the largest value kept: a larger one costs more to copy
	// than the read it would save.
	ValueMax = 16 << 10
	// entryOverhead is what an entry costs besides its key and value.
	entryOverhead = 64
	// RaiseRetry is how long reads leave the fence alone after raising it
	// failed, so that a backend that cannot be written does not cost every
	// read a failed write.
	RaiseRetry = time.Second
)

// New returns an empty cache that keeps at most limit bytes.
func New(limit int) *Cache {
	return &Cache{writing: map[string]int{}, items: map[string]cached{}, limit: limit}
}

// Get returns a copy of key's value if it was kept under term and is live
// at now, on the clock the store filled it by.
func (c *Cache) Get(term uint64, key string, now int64) ([]byte, bool) {
	c.mu.RLock()
	e, ok := c.items[key]
	current := c.live(term)
	c.mu.RUnlock()
	if !ok || !current || (e.expires != 0 && e.expires <= now) {
		return nil, false
	}
	return append(make([]byte, 0, len(e.value)), e.value...), true
}

// GetUnder is Get under the serving term of ctx's call
// (ports.FencingToken); a call with none is never answered from the cache.
func (c *Cache) GetUnder(ctx context.Context, key string, now int64) ([]byte, bool) {
	token, termed := ports.FencingToken(ctx)
	if !termed {
		return nil, false
	}
	return c.Get(token, key, now)
}

// Ticket returns the generation a read of key under term must find
// unchanged to keep what it read; ok is false when nothing it reads may
// be kept: term is not the cache's, or key is being written.
func (c *Cache) Ticket(term uint64, key string) (gen uint64, ok bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.gen, c.live(term) && c.writing[key] == 0
}

// live reports whether term is the cache's and not over; the caller holds
// mu.
func (c *Cache) live(term uint64) bool { return c.term == term && term > c.ended }

// Fill keeps value, read under term with ticket gen, unless a write began
// or ended since or the term moved on. expires is on the clock Get is
// given, 0 for never.
func (c *Cache) Fill(term, gen uint64, key string, value []byte, expires int64) {
	if len(value) > ValueMax {
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

// Current reports whether term is the cache's and not over.
func (c *Cache) Current(term uint64) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.live(term)
}

// begin starts term, newer than any the cache has held and not over, with
// nothing kept.
func (c *Cache) begin(term uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if term > c.term && term > c.ended {
		c.term = term
		c.empty()
	}
}

// End ends every term up to term: from then on nothing is served or kept
// under them. A store calls it from ports.TermEnder, and when the fence
// shows a term to be over.
func (c *Cache) End(term uint64) {
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
func (c *Cache) empty() {
	c.gen++
	clear(c.items)
	c.bytes = 0
}

// WriteStarts marks key as being written until the returned function runs,
// which the writer calls once the write has ended, whatever its outcome.
func (c *Cache) WriteStarts(key string) (ended func()) {
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
func (c *Cache) drop(key string) {
	c.gen++
	c.forget(key)
}

// forget removes key's entry and its size; the caller holds mu.
func (c *Cache) forget(key string) {
	if e, ok := c.items[key]; ok {
		delete(c.items, key)
		c.bytes -= entrySize(key, e.value)
	}
}

// Trust reports whether reads under token may be kept: token is the
// cache's live term, or a newer one, which then begins once raise has
// moved the backend's fence to it and seen it stand there, so that no
// write of an older term lands after the cache has read. raise fails with
// ports.ErrFenced when the fence stands above token. A term the fence has
// passed, or one ended, is not trusted; nor is any when the fence cannot
// be raised. The read itself goes on, uncached, and so does every other
// read while one raises the fence: none waits for the lock the raise may
// wait for.
func (c *Cache) Trust(ctx context.Context, token uint64, raise func(context.Context, uint64) error) bool {
	if c.Current(token) {
		return true
	}
	if time.Since(time.Unix(0, c.failedAt.Load())) < RaiseRetry || !c.termMu.TryLock() {
		return false
	}
	defer c.termMu.Unlock()
	if c.Current(token) {
		return true
	}
	c.mu.RLock()
	ended := c.ended
	c.mu.RUnlock()
	if token > math.MaxInt64 || token <= ended {
		return false
	}
	if err := raise(ctx, token); err != nil {
		if !errors.Is(err, ports.ErrFenced) {
			c.failedAt.Store(time.Now().UnixNano())
		}
		return false
	}
	c.begin(token)
	return c.Current(token)
}

// Holds reports whether key is kept, under whatever term.
func (c *Cache) Holds(key string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	_, ok := c.items[key]
	return ok
}

// RaiseFailed reports whether raising the fence for a read has ever
// failed for a reason other than a newer term.
func (c *Cache) RaiseFailed() bool { return c.failedAt.Load() != 0 }
