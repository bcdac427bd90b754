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
// A write whose outcome its store cannot know when it returns (its caller
// gave up, the connection broke) may still land later: its key is kept no
// more for the rest of the term.
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
	unknown map[string]uint64 // key -> the newest term of a write of it whose outcome is unknown
	items   map[string]cached
	bytes   int
	limit   int // the most bytes kept

	termMu sync.Mutex // one read at a time raises the fence for a new term
	// failedAt is when raising the fence for a term last failed, for a
	// reason other than a newer term (a full disk, a read-only file, a
	// lost connection), in nanoseconds of this process's monotonic clock
	// (since epoch); 0 for never: reads wait RaiseRetry before they try
	// again.
	failedAt atomic.Int64
}

type cached struct {
	value []byte
	// When the value expires, by the wall clock and by the monotonic one
	// (since epoch); both 0 for never.
	wall, mono int64
}

// epoch starts the monotonic clock that failedAt and expiry count on.
var epoch = time.Now()

// expiredAt reports whether e has expired at the readings wall and mono,
// by whichever clock says so first: the wall clock, which counts a
// suspend of the host that the monotonic clock does not, and the
// monotonic one, which a step of the wall clock back does not move.
func (e cached) expiredAt(wall, mono int64) bool {
	return e.wall != 0 && (wall >= e.wall || mono >= e.mono)
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
	// unknownMax bounds the keys kept out for a write of unknown outcome;
	// past it, the term keeps nothing more.
	unknownMax = 4096
)

// New returns an empty cache that keeps at most limit bytes.
func New(limit int) *Cache {
	return &Cache{writing: map[string]int{}, unknown: map[string]uint64{}, items: map[string]cached{}, limit: limit}
}

// Get returns a copy of key's value if it was kept under term and is live
// at now.
func (c *Cache) Get(term uint64, key string, now time.Time) ([]byte, bool) {
	c.mu.RLock()
	e, ok := c.items[key]
	current := c.live(term)
	c.mu.RUnlock()
	if !ok || !current || e.expiredAt(now.UnixNano(), int64(now.Sub(epoch))) {
		return nil, false
	}
	return append(make([]byte, 0, len(e.value)), e.value...), true
}

// GetUnder is Get under the serving term of ctx's call
// (ports.FencingToken); a call with none is never answered from the cache.
func (c *Cache) GetUnder(ctx context.Context, key string, now time.Time) ([]byte, bool) {
	token, termed := ports.FencingToken(ctx)
	if !termed {
		return nil, false
	}
	return c.Get(token, key, now)
}

// Read is a read of one key that may be kept, begun by StartRead.
type Read struct {
	c         *Cache
	term, gen uint64
	key       string
}

// StartRead begins a read of key under ctx's serving term and reports
// whether what it finds may be kept: the call carries a term, the cache
// trusts it (Trust, which raises the fence through raise on a term's
// first read), and the key is not being written. The store then reads its
// backend and, if ok, hands what it found to Read.Keep.
func (c *Cache) StartRead(ctx context.Context, key string, raise func(context.Context, uint64) error) (Read, bool) {
	token, termed := ports.FencingToken(ctx)
	if !termed || !c.Trust(ctx, token, raise) {
		return Read{}, false
	}
	gen, ok := c.Ticket(token, key)
	return Read{c: c, term: token, gen: gen, key: key}, ok
}

// Keep keeps value, which the read found, as Fill does.
func (r Read) Keep(value []byte, expires time.Time) { r.c.Fill(r.term, r.gen, r.key, value, expires) }

// Ticket returns the generation a read of key under term must find
// unchanged to keep what it read; ok is false when nothing it reads may
// be kept: term is not the cache's, key is being written, or a write of
// it may yet land.
func (c *Cache) Ticket(term uint64, key string) (gen uint64, ok bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.gen, c.live(term) && c.writing[key] == 0 && !c.mayLand(key)
}

// live reports whether term is the cache's and not over; the caller holds
// mu.
func (c *Cache) live(term uint64) bool { return c.term == term && term > c.ended }

// Fill keeps value, read under term with ticket gen, unless a write began
// or ended since or the term moved on. expires is when the value stops
// being live, zero for never; a store sets it no later than its backend
// would judge the value expired.
func (c *Cache) Fill(term, gen uint64, key string, value []byte, expires time.Time) {
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
	e := cached{value: append([]byte(nil), value...)}
	if !expires.IsZero() {
		// A time with no monotonic reading (read from a file) measures
		// both on the wall clock.
		e.wall, e.mono = max(1, expires.UnixNano()), int64(expires.Sub(epoch))
	}
	c.items[key] = e
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

// mayLand reports whether a write of key of unknown outcome may still
// land; the caller holds mu. One of a term older than the cache's cannot:
// the fence, raised to the cache's term before it began, refuses it.
func (c *Cache) mayLand(key string) bool {
	t, ok := c.unknown[key]
	return ok && t >= c.term
}

// begin starts term, newer than any the cache has held and not over, with
// nothing kept. The fence stands at term by now, so every write of an
// older term has landed or been refused: its outcome is no longer unknown.
func (c *Cache) begin(term uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if term > c.term && term > c.ended {
		c.term = term
		c.empty()
		for k, t := range c.unknown {
			if t < term {
				delete(c.unknown, k)
			}
		}
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

// WriteStarts marks key as being written, under term (0 for a write
// without one), until the returned function runs, which the writer calls
// once the write has returned, whatever its outcome: known is false when
// the write may still land (its caller gave up while it was in flight,
// the connection broke), and key is then kept no more until a newer term
// than the write's begins. A write without a term is fenced by none, so it
// may land in any later term: its key is then never kept again.
func (c *Cache) WriteStarts(term uint64, key string) (ended func(known bool)) {
	if term == 0 {
		term = math.MaxUint64
	}
	c.mu.Lock()
	c.writing[key]++
	c.drop(key)
	c.mu.Unlock()
	return func(known bool) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.writing[key]--; c.writing[key] <= 0 {
			delete(c.writing, key)
		}
		c.drop(key)
		if known {
			return
		}
		if _, ok := c.unknown[key]; !ok && len(c.unknown) >= unknownMax {
			// Past the bound, every term up to the write's ends; for an
			// unfenced write, every term: the cache keeps nothing again.
			c.ended = max(c.ended, c.term, term)
			c.empty()
			return
		}
		c.unknown[key] = max(c.unknown[key], term)
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
	if at := c.failedAt.Load(); at != 0 && time.Since(epoch)-time.Duration(at) < RaiseRetry || !c.termMu.TryLock() {
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
			c.failedAt.Store(max(1, int64(time.Since(epoch))))
		}
		return false
	}
	c.begin(token)
	return c.Current(token)
}

// Answers is what a store that keeps reads gives the engine besides the
// port: gets answered from memory (ports.QuickGetter) and the end of a
// term (ports.TermEnder). The store embeds it.
type Answers struct{ c *Cache }

var (
	_ ports.QuickGetter = Answers{}
	_ ports.TermEnder   = Answers{}
)

// Answers returns the cache's answers to the engine.
func (c *Cache) Answers() Answers { return Answers{c} }

// QuickGet answers from what the cache keeps under ctx's term, if it
// keeps key.
func (a Answers) QuickGet(ctx context.Context, key string) ([]byte, bool, error) {
	v, ok := a.c.GetUnder(ctx, key, time.Now())
	return v, ok, nil
}

// EndTerm ends the term: the engine calls it before it writes its release,
// and from then on reads under its term go to the backend.
func (a Answers) EndTerm(token uint64) { a.c.End(token) }

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
