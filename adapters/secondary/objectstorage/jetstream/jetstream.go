// Package jetstream is object storage in a JetStream object store bucket,
// which every engine of a NATS account reaches and a cluster replicates.
// Objects are stored in the object store's own layout (chunks of 128 KiB
// under $O.<bucket>.C.<nuid>, a description under $O.<bucket>.M.<name>),
// so `nats object` reads what the engine writes.
//
// Both ways stream: Put publishes a chunk as soon as it has read one, Get
// reads a chunk at a time from the stream's leader. A Put becomes visible
// when its description is written, after every chunk, and that write is
// conditioned on the description it replaces, so IfAbsent and IfMatch are
// atomic; a deletion is written the same way, so DeleteIfMatch is too. The
// ETag is the SHA-256 digest of the content.
//
// Under a fencing token the description and the deletion are fenced (ADR
// 0020): once a newer term has written, the stream refuses them with
// ports.ErrFenced, and a refused Put purges its chunks. The chunks are
// not fenced: no read reaches them before a description names them. A
// term told to hold its raise (ports.RaiseHolder, ADR 0023) checks the
// fence without raising it until the time it was given, on the lease's
// clock, so the transfers of an engine that released the lease finish
// within its drain; at that time the store raises it, or when it closes,
// if that comes first. A term told a hold that has already ended (one not
// taken from a release) has the store raise the fence at once, whether
// the term writes or not.
package jetstream

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/abi-engine/engine/adapters/secondary/internal/jsbucket"
	"github.com/abi-engine/engine/adapters/secondary/internal/objread"
	"github.com/abi-engine/engine/adapters/secondary/objectstorage/internal/objkey"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

var (
	_ ports.ObjectStorage = (*Store)(nil)
	_ ports.RaiseHolder   = (*Store)(nil)
)

const (
	// DefaultBucket is the bucket used when the configuration names none.
	DefaultBucket = "ABI_OBJECTS"
	// chunkSize is the object store's usual chunk.
	chunkSize = jsbucket.ObjectChunkSize
	// headerChunk numbers a chunk from 0, so a range read finds its first
	// chunk without reading those before it.
	headerChunk = "Abi-Chunk"
)

// Config is the adapter's block under services.object_storage.config.
type Config struct {
	// Bucket is the object store bucket; default ABI_OBJECTS.
	Bucket string `yaml:"bucket"`
	// Replicas is 1, 3 or 5 (default 1), applied when the bucket is made.
	Replicas int `yaml:"replicas"`
	// Logger is where the store logs; nil means slog.Default().
	Logger *slog.Logger `yaml:"-"`
}

// LocalStorage implements ports.StorageConfig: the bucket is on the NATS
// servers every engine of the account reaches.
func (Config) LocalStorage() string { return "" }

// Default fills the bucket's name and replica count.
func (c *Config) Default(string) {
	if c.Bucket == "" {
		c.Bucket = DefaultBucket
	}
	c.Replicas = max(c.Replicas, 1)
}

// SetLogger implements storage.LoggerSetter.
func (c *Config) SetLogger(log *slog.Logger) { c.Logger = log }

// Check refuses bad settings, naming the key under prefix.
func (c Config) Check(prefix string) error { return jsbucket.Config(c).Check(prefix) }

// Describe names the bucket and its replicas.
func (c Config) Describe() string {
	return strings.Replace(jsbucket.Config(c).Describe(), "bucket", "object store", 1)
}

// HoldRaise implements ports.RaiseHolder: until is read on clock, the
// lease's, not on the store's own, which its sweeps read. Once clock
// reads until the store raises the fence to token itself (raiseAtEnd), so
// that an older term's write is refused from then on though the held term
// writes nothing more; a term not held, whose until clock reads already,
// has it raised at once, without holding up the caller, which serves the
// term meanwhile (its first write raises the fence if this has not). A
// store that closes before then raises it as it closes (Close).
func (s *Store) HoldRaise(token uint64, until time.Time, clock domain.Clock) {
	s.held.Store(token)
	s.b.HoldRaise(token, func() bool { return clock.Now().Before(until) })
	go s.raiseAtEnd(token, until, clock)
}

// raiseAtEnd raises the fence to token once clock reads until, as the
// term's first write past its hold would (ADR 0023): the writes of the
// term before, which landed in the hold, are refused from then on, and one
// that comes late does not land over what the held term wrote in it. It
// waits on a timer, which runs on Go's clock and stands still while the
// machine is suspended, so on waking it reads clock again and waits for
// the rest if until is still ahead; a timer that fires late after a
// resume only delays this raise, and the term's first write past until
// raises the fence meanwhile. It tries again after a failure until the
// raise is done, a newer term has raised the fence (ErrFenced), or the
// store closes, and logs the first failure: until the raise is done, an
// older engine's late writes are not refused.
func (s *Store) raiseAtEnd(token uint64, until time.Time, clock domain.Clock) {
	for {
		d := until.Sub(clock.Now())
		if d <= 0 {
			break
		}
		select {
		case <-s.closing.Done():
			return
		case <-s.sweeping.after(d):
		}
	}
	ctx := ports.WithFencingToken(s.closing, token)
	for attempt := 0; ; attempt++ {
		err := s.b.Fence(ctx)
		if err == nil || errors.Is(err, ports.ErrFenced) {
			return
		}
		if attempt == 0 && s.closing.Err() == nil {
			s.log.Warn("the object store cannot raise its fence to its term yet; an older engine's late writes are not refused until it does, and it tries again until then or until it closes", "bucket", s.b.Name(), "term", token, "err", err)
		}
		select {
		case <-s.closing.Done():
			return
		case <-time.After(min(25*time.Millisecond<<min(attempt, 8), 5*time.Second)):
		}
	}
}

// Store is the bucket on a connection.
type Store struct {
	b  *jsbucket.Bucket
	nc *nats.Conn
	// closing ends when Close is called: a Put stops writing chunks.
	closing context.Context
	close   context.CancelFunc
	// mu guards closed, readers, owed and purging; writes counts the
	// Puts and Deletes under way, which Close waits for before it closes
	// the connection.
	mu     sync.Mutex
	closed bool
	writes sync.WaitGroup
	// readers counts the open readers of each object's chunks (by the
	// object's NUID); a purge of chunks still read is owed until the last
	// of them ends, and purging holds those whose purge is under way. An
	// owed purge keeps the values of the call that owed it (owed).
	readers map[string]int
	owed    map[string]context.Context
	purging map[string]bool
	// sweeping times the sweeps of chunks that no description names;
	// swept closes when the sweeps have ended, after Close. sighted is
	// what the last sweep found of such chunks; only the sweeps use it.
	sweeping sweeping
	swept    chan struct{}
	sighted  map[string]sighting
	// held is the term last told to hold its raise (HoldRaise), 0 when
	// none was; Close raises the fence to it. log hears of a raise at
	// Close that failed.
	held atomic.Uint64
	log  *slog.Logger
}

// sighting is a sweep's finding of an object's chunks that no live
// description named: the sequence of the newest, and when, on this
// engine's clock, the sweep had read it, after the server stored it.
type sighting struct {
	seq uint64
	at  time.Time
}

// sweeping says when chunks that no live description names are swept,
// and how far apart a Put may write its chunks.
type sweeping struct {
	// age is how long, on this engine's clock, the sweeps must have found
	// such chunks unchanged, their newest the same, before they are swept.
	age time.Duration
	// every is the time between sweeps; the first runs at Open.
	every time.Duration
	// stall bounds, on the local clock now, the time between two chunks
	// of a Put and between its last chunk and its description.
	stall time.Duration
	now   func() time.Time
	// after waits on the clock now, as time.After does on the local one.
	after func(time.Duration) <-chan time.Time
}

// defaultSweeping sweeps the chunks of a Put cut short by a crash once
// the sweeps have found them unchanged for an hour. A Put still under way,
// on this engine or on one that fenced itself, writes its next chunk
// within stall of the one before, or its description within
// describeTimeout of that; a sweep reads the descriptions after the age
// has passed since it first found the newest chunk, so a description
// naming chunks it judged old was stored before it read them:
// age > stall + describeTimeout. Only lengths of time on one clock are
// compared: the time a message carries is its leader's at the time, and
// the leader of a replicated stream moves to servers whose clocks differ.
var defaultSweeping = sweeping{age: time.Hour, every: time.Hour, stall: 15 * time.Minute, now: time.Now, after: time.After}

// sweepTimeout bounds one sweep.
const sweepTimeout = 10 * time.Minute

// Open opens the bucket on nc, creating it when it is missing. The store
// owns nc: Close closes it.
func Open(ctx context.Context, c Config, nc *nats.Conn) (*Store, error) {
	return open(ctx, c, nc, defaultSweeping)
}

func open(ctx context.Context, c Config, nc *nats.Conn, sw sweeping) (*Store, error) {
	c.Default("")
	b, err := jsbucket.OpenObjects(ctx, nc, jsbucket.Config(c), "abi-engine objects")
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("object storage jetstream: %w", err)
	}
	closing, cancel := context.WithCancel(context.Background())
	s := &Store{
		b: b, nc: nc, closing: closing, close: cancel,
		readers: map[string]int{}, owed: map[string]context.Context{}, purging: map[string]bool{},
		sweeping: sw, swept: make(chan struct{}), sighted: map[string]sighting{},
		log: c.Logger,
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	// It sweeps at Open and then every sweeping.every until Close.
	go jsbucket.Sweeps(s.closing, sw.every, sweepTimeout, s.sweep, s.swept)
	return s, nil
}

// closeWait bounds how long Close waits for the Puts and Deletes under
// way: a description's write and a purge after it.
const closeWait = describeTimeout + purgeTimeout

// Close stops the Puts under way from writing chunks and the sweeps,
// waits (within closeWait) for them and the Deletes under way to end,
// purges and all, raises the fence to a term told to hold its raise
// (raiseHeld), purges (within purgeTimeout, all of them) the chunks
// still owed to readers, whose reads end with the connection, and closes
// the store's connection; closing twice is harmless. Closing the
// connection under a write would fail its purge, and leave chunks that no
// description names in the stream until a sweep took them.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.close()
	ended := make(chan struct{})
	go func() {
		s.writes.Wait()
		<-s.swept
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(closeWait):
	}
	s.raiseHeld()
	s.mu.Lock()
	owed := s.owed
	s.owed = map[string]context.Context{}
	s.mu.Unlock()
	// The owed purges share one purge's time: with the broker gone, each
	// on its own would hold Close for purgeTimeout. What they leave, the
	// sweeps take.
	deadline := time.Now().Add(purgeTimeout)
	for id, call := range owed {
		ctx, cancel := context.WithDeadline(call, deadline)
		s.purgeNow(ctx, id)
		cancel()
	}
	s.nc.Close()
	return nil
}

// closeRaiseTimeout bounds the raise of a held term's fence at Close.
const closeRaiseTimeout = 10 * time.Second

// raiseHeld raises the fence to the term last told to hold its raise, if
// one was and no newer term has raised it, whether its hold has ended or
// not (ADR 0023). An engine closes the store once it has released the
// lease and drained: its own term writes nothing more, and the successor,
// whose raise is held too, conditions its writes on the fence as it
// stands. Left at the older term, the fence would let an engine older than
// this one, paused past its drain, land its writes through the
// successor's hold, since the store that was to raise it past them at its
// hold's end is gone. An engine older than this one that is still draining
// when this store closes (a second handover within the first's drain) has
// its late uploads refused: the safe way. A raise that fails within
// closeRaiseTimeout leaves the fence where it was, and says so.
func (s *Store) raiseHeld() {
	token := s.held.Swap(0) // once: a second Close has no connection
	if token == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeRaiseTimeout)
	defer cancel()
	if err := s.b.RaiseHeld(ctx, token); err != nil && !errors.Is(err, ports.ErrFenced) {
		s.log.Warn("the object store closed without raising its fence to the term whose raise it held; an older engine's late writes are not refused until the successor raises it", "bucket", s.b.Name(), "term", token, "err", err)
	}
}

// errClosed ends the Puts under way when the store closes.
var errClosed = fmt.Errorf("the store closed: %w", nats.ErrConnectionClosed)

// begin counts a write under way, which Close waits for; after Close it
// fails.
func (s *Store) begin(op, key string) (end func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("%s %q: %w", op, key, errClosed)
	}
	s.writes.Add(1)
	return s.writes.Done, nil
}

func metaToken(key string) string { return "M." + base64.URLEncoding.EncodeToString([]byte(key)) }

func chunkToken(id string) string { return "C." + id }

// describeTimeout bounds a Put's rounds of reading its key again and
// writing its description, and its watch for a description whose caller
// gave up (landed).
const describeTimeout = 30 * time.Second

// rounds bounds how often a call reads an object's description again
// after another write replaced it under the call.
const rounds = 32

// current is an object's description as the leader has it.
type current struct {
	// revision is the description's; 0 when the key never had one.
	revision uint64
	live     bool
	info     jetstream.ObjectInfo
}

func (s *Store) current(ctx context.Context, key string) (current, error) {
	e, err := s.b.Last(ctx, metaToken(key))
	if err != nil {
		return current{}, fmt.Errorf("object %q: %w", key, err)
	}
	c := current{revision: e.Revision}
	if !e.Live {
		return c, nil
	}
	if err := json.Unmarshal(e.Value, &c.info); err != nil {
		return current{}, fmt.Errorf("object %q: unreadable description at revision %d: %w", key, e.Revision, err)
	}
	c.live = !c.info.Deleted
	return c, nil
}

func describe(key string, info jetstream.ObjectInfo) ports.ObjectInfo {
	ct := info.Headers.Get("Content-Type")
	if ct == "" {
		ct = objkey.DefaultContentType
	}
	return ports.ObjectInfo{Key: key, Size: int64(info.Size), ETag: info.Digest, ContentType: ct, Modified: info.ModTime}
}

// Put publishes the chunks as it reads them, then the description,
// conditioned on the one it replaces, and purges that one's chunks, a
// deleted object's as well. A Put
// that fails before its description is sent, or loses its condition,
// purges its own chunks and leaves the previous object. A caller that
// gives up once the description is sent ends its sending: the Put then
// reads, within 5 s, whether it was stored. A Put whose chunks come more
// than 15 minutes apart fails: the sweeps may have taken them (sweep).
func (s *Store) Put(ctx context.Context, key string, r io.Reader, opts ports.PutObjectOptions) (ports.ObjectInfo, error) {
	if err := objkey.CheckPut(key, opts); err != nil {
		return ports.ObjectInfo{}, err
	}
	end, err := s.begin("put", key)
	if err != nil {
		return ports.ObjectInfo{}, err
	}
	defer end()
	ct := opts.ContentType
	if ct == "" {
		ct = objkey.DefaultContentType
	}
	if err := s.b.Fence(ctx); err != nil {
		return ports.ObjectInfo{}, fmt.Errorf("put %q: %w", key, err)
	}
	cur, err := s.current(ctx, key)
	if err != nil {
		return ports.ObjectInfo{}, fmt.Errorf("put %w", err)
	}
	switch {
	case opts.IfAbsent:
		if cur.live {
			return ports.ObjectInfo{}, fmt.Errorf("put %q if absent: it exists: %w", key, ports.ErrConflict)
		}
	case opts.IfMatch != "":
		if !cur.live || cur.info.Digest != opts.IfMatch {
			return ports.ObjectInfo{}, fmt.Errorf("put %q if the ETag is %q: it is not: %w", key, opts.IfMatch, ports.ErrConflict)
		}
	}
	id := nuid.Next()
	// The chunks' writes end when the caller gives up or the store closes.
	wctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	defer context.AfterFunc(s.closing, func() { stop(errClosed) })()
	info, last, err := s.writeChunks(wctx, id, r)
	if err == nil && info.Chunks > 0 {
		err = s.stalled(last, "its description")
	}
	if wctx.Err() != nil {
		// A caller that gave up, or a store that closed, before the
		// description is written gets nothing stored.
		err = context.Cause(wctx)
	}
	if err != nil {
		s.purge(ctx, id)
		return ports.ObjectInfo{}, fmt.Errorf("put %q: %w", key, err)
	}
	info.Name, info.Bucket, info.NUID = key, s.b.Name(), id
	info.Headers = nats.Header{"Content-Type": []string{ct}}
	info.Opts = &jetstream.ObjectMetaOptions{ChunkSize: chunkSize}
	info.ModTime = time.Now().UTC()
	// Once sent, the description may be stored whatever becomes of the
	// caller: a caller giving up ends its sending, and the Put then reads
	// whether it was stored (landed) on a context of its own. Only a write
	// the stream refused stored nothing and lets the chunks go; after a
	// failure whose outcome is unknown the description may name them, and
	// purging them would leave an object whose content is gone, so they
	// stay.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), describeTimeout)
	defer cancel()
	cur, err = s.describeOver(dctx, ctx, key, info, cur, opts.IfAbsent || opts.IfMatch != "")
	if err != nil {
		if !errors.Is(err, errUnknownOutcome) {
			s.purge(ctx, id)
		}
		return ports.ObjectInfo{}, fmt.Errorf("put %q: %w", key, err)
	}
	// The chunks a deleted description names go too: its Delete purged
	// them, unless it was cut off first, and then only this purge would.
	if cur.info.NUID != "" {
		s.purge(ctx, cur.info.NUID)
	}
	return describe(key, info), nil
}

// describeOver writes info as key's description over cur, the one read,
// and returns the description it replaced. It is written over the one
// read even for a plain Put, so the chunks purged after it are those of
// the object it replaced: a plain Put that another write overtook reads
// the key again and replaces that one, where writing blind would leave
// the other write's chunks in the stream for good. Only its last round
// writes blind, so that a plain Put never fails for want of a turn. A
// conditional Put that another write overtook fails with ErrConflict.
// The description is sent on the caller's context: an engine that fenced
// itself gave its calls up so that they would not write beside its
// successor. Reading the key again and writing over it did, for up to
// describeTimeout after the fence, over the successor's newer object; and
// a description sent again once a lost connection was back landed while
// the successor served. After the caller gave up with the outcome unknown,
// the Put only reads whether its description landed (landed), on ctx.
func (s *Store) describeOver(ctx, caller context.Context, key string, info jetstream.ObjectInfo, cur current, conditional bool) (current, error) {
	desc, err := json.Marshal(info)
	if err != nil {
		return current{}, err
	}
	for round := 1; ; round++ {
		expect := &cur.revision
		if !conditional && round == rounds {
			expect = nil
		}
		// A caller that gave up before this sending has nothing stored:
		// the rounds before were refused, and a request on an ended
		// context is never sent. Left to landed, the Put watched for a
		// description that could not come and kept its chunks for good.
		if err := caller.Err(); err != nil {
			return current{}, fmt.Errorf("the caller gave up before the description was sent: %w", err)
		}
		m := nats.NewMsg("")
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		m.Data = desc
		_, err := s.b.Publish(caller, metaToken(key), m, expect)
		switch {
		case err == nil:
			return cur, nil
		case !errors.Is(err, jsbucket.ErrConflict) && !refused(err) && caller.Err() != nil:
			switch s.landed(ctx, key, cur.revision, func(d jetstream.ObjectInfo) bool { return !d.Deleted && d.NUID == info.NUID }) {
			case landedMine:
				return cur, nil
			case landedOther:
				// The description read is replaced, by this one or by the
				// other write: the rollup of the other took this one, stored
				// or not, from the stream, and which it was is not known.
				// Either way the object read is gone, and only this Put
				// purges its chunks when this description replaced it (the
				// other write purged this one's); none would otherwise.
				if cur.info.NUID != "" {
					s.purge(ctx, cur.info.NUID)
				}
				if expect != nil {
					// Conditioned on the description read, this one can no
					// longer be stored: its chunks go too.
					return current{}, fmt.Errorf("another write came after it, and the caller gave up: %w", err)
				}
			}
			return current{}, fmt.Errorf("%w: %w", errUnknownOutcome, err)
		case !errors.Is(err, jsbucket.ErrConflict) && !refused(err):
			return current{}, fmt.Errorf("%w: %w", errUnknownOutcome, err)
		case !errors.Is(err, jsbucket.ErrConflict):
			return current{}, err
		case conditional:
			return current{}, fmt.Errorf("another write came first: %w", ports.ErrConflict)
		case caller.Err() != nil:
			return current{}, fmt.Errorf("another write came first, and the caller gave up: %w", caller.Err())
		}
		if cur, err = s.current(ctx, key); err != nil {
			return current{}, err
		}
	}
}

// landWait bounds how long a write whose caller gave up with its outcome
// unknown watches for its description to land.
const landWait = 5 * time.Second

// landing is what landed learned of a description whose call gave up.
type landing int

const (
	// landedUnknown: no description came after the one it was written over.
	landedUnknown landing = iota
	// landedMine: it was stored, and is the key's description.
	landedMine
	// landedOther: another description came after the one it was written
	// over; it was not stored, or was replaced since, its chunks purged by
	// the write that replaced it.
	landedOther
)

// landed reads key's description, within landWait, until one after
// revision rev is there, and reports whether it is the one mine matches:
// the write of a call that gave up with its outcome unknown, which is not
// sent again. None after rev by the end of the wait leaves the outcome
// unknown.
func (s *Store) landed(ctx context.Context, key string, rev uint64, mine func(jetstream.ObjectInfo) bool) landing {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), landWait)
	defer cancel()
	for {
		if cur, err := s.current(ctx, key); err == nil && cur.revision > rev {
			if mine(cur.info) {
				return landedMine
			}
			return landedOther
		}
		select {
		case <-ctx.Done():
			return landedUnknown
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// errUnknownOutcome is a description write that may have been stored: no
// answer came, or the stream had not decided it when the attempts ended.
var errUnknownOutcome = errors.New("the description may have been stored")

// refused is a write the stream answered with an error that decides it,
// one that none of its sendings may have stored (ports.ErrNotDone), one
// of an older term than the bucket's fence (ports.ErrFenced), or one the
// NATS user's permissions deny (jsbucket.ErrPermission: the server sent
// it to no stream): it stored nothing. Refusals made while another write of the key, or an
// earlier attempt of this one, was in flight (10164, 10158) decide nothing
// alone.
func refused(err error) bool {
	if errors.Is(err, ports.ErrNotDone) || errors.Is(err, ports.ErrFenced) || errors.Is(err, jsbucket.ErrPermission) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequenceConstant &&
		apiErr.ErrorCode != 10158
}

// writeChunks publishes r in chunks under id and returns the size, count
// and digest, and when the last chunk was stored. Chunks further apart
// than the sweeps allow fail the Put: a sweep may have taken those before.
func (s *Store) writeChunks(ctx context.Context, id string, r io.Reader) (jetstream.ObjectInfo, time.Time, error) {
	var (
		info jetstream.ObjectInfo
		last time.Time
	)
	h := sha256.New()
	buf := make([]byte, chunkSize)
	for {
		n, err := objread.Full(r, buf)
		if n > 0 {
			h.Write(buf[:n])
			m := nats.NewMsg("")
			m.Data = buf[:n]
			m.Header.Set(headerChunk, strconv.FormatUint(uint64(info.Chunks), 10))
			if _, perr := s.b.PublishUnfenced(ctx, chunkToken(id), m, nil); perr != nil {
				return info, last, perr
			}
			if info.Chunks > 0 {
				if serr := s.stalled(last, fmt.Sprintf("chunk %d", info.Chunks+1)); serr != nil {
					return info, last, serr
				}
			}
			last = s.sweeping.now()
			info.Size += uint64(n)
			info.Chunks++
		}
		// Only the reader's end is the object's end: one that fails with
		// io.ErrUnexpectedEOF was cut short.
		if errors.Is(err, io.EOF) {
			info.Digest = digest(h)
			return info, last, nil
		}
		if err != nil {
			return info, last, fmt.Errorf("read the content after %d bytes: %w", info.Size, err)
		}
	}
}

// stalled fails a Put whose next write, what, comes more than the sweeps'
// stall after its last chunk was stored at last: a sweep judges chunks
// by their newest, and may have taken the Put's as left by a crash.
func (s *Store) stalled(last time.Time, what string) error {
	if d := s.sweeping.now().Sub(last); d > s.sweeping.stall {
		return fmt.Errorf("%s came %v after the chunk before it, more than %v, and the chunks may have been swept as left by a crash: %w",
			what, d.Round(time.Millisecond), s.sweeping.stall, context.DeadlineExceeded)
	}
	return nil
}

// sweep purges the chunks that no live description names and that the
// sweeps found unchanged, their newest chunk the same, for at least
// sweeping.age on this engine's clock: those of a Put cut short by a
// crash, or of an object whose Put or Delete died before its purge. The
// first sweep to find such chunks only notes them, with the time it had
// read their newest; a later sweep purges them when it starts that age
// after, before it reads the descriptions, and they still have the same
// newest chunk and no description. A Put still under way writes a chunk
// or its description meanwhile (stalled). The time a message carries is
// never compared: its leader stamped it, on its clock, and the leader
// that lists the chunks later may be another server, whose clock is not
// the same. Chunks a Get of this store still reads are purged once it
// ends.
func (s *Store) sweep(ctx context.Context) error {
	start := s.sweeping.now()
	named, err := s.named(ctx)
	if err != nil {
		return err
	}
	tokens, err := s.b.Tokens(ctx, "C.>")
	if err != nil {
		return err
	}
	sighted := make(map[string]sighting, len(s.sighted))
	for _, t := range tokens {
		id := strings.TrimPrefix(t, "C.")
		if named[id] {
			continue
		}
		m, err := s.b.LastMsg(ctx, t)
		if err != nil {
			return err
		}
		if m.Seq == 0 {
			continue
		}
		was, ok := s.sighted[id]
		if !ok || was.seq != m.Seq {
			sighted[id] = sighting{seq: m.Seq, at: s.sweeping.now()}
			continue
		}
		if start.Sub(was.at) < s.sweeping.age {
			sighted[id] = was
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		s.purge(ctx, id)
	}
	s.sighted = sighted
	return nil
}

// named is the set of the chunks' ids that live descriptions name. A
// description it cannot read fails the sweep: it may name chunks.
func (s *Store) named(ctx context.Context) (map[string]bool, error) {
	tokens, err := s.b.Tokens(ctx, "M.>")
	if err != nil {
		return nil, err
	}
	named := make(map[string]bool, len(tokens))
	for _, t := range tokens {
		e, err := s.b.Last(ctx, t)
		if err != nil {
			return nil, err
		}
		if !e.Live {
			continue
		}
		var d struct {
			NUID    string `json:"nuid"`
			Deleted bool   `json:"deleted"`
		}
		if err := json.Unmarshal(e.Value, &d); err != nil {
			return nil, fmt.Errorf("sweep: unreadable description %s at revision %d: %w", t, e.Revision, err)
		}
		if !d.Deleted {
			named[d.NUID] = true
		}
	}
	return named, nil
}

func digest(h hash.Hash) string {
	return "SHA-256=" + base64.URLEncoding.EncodeToString(h.Sum(nil))
}

// purgeTimeout bounds the purge of an object's chunks.
const purgeTimeout = 10 * time.Second

// purge removes the chunks of id for the call of ctx, on a context of its
// own that keeps ctx's values (its term's fencing token, say) but not its
// end: it runs after the call's context may have ended. Chunks that a Get
// of this store is still reading stay until its reader ends (read): a Get
// answered with an object reads the whole of it, as a Get of a file or of
// S3 does, even when a Put replaces the object or a Delete removes it
// meanwhile.
func (s *Store) purge(ctx context.Context, id string) {
	call := context.WithoutCancel(ctx)
	s.mu.Lock()
	if s.readers[id] > 0 {
		if _, ok := s.owed[id]; !ok {
			s.owed[id] = call
		}
		s.mu.Unlock()
		return
	}
	s.purging[id] = true
	s.mu.Unlock()
	pctx, cancel := context.WithTimeout(call, purgeTimeout)
	defer cancel()
	s.purgeNow(pctx, id)
	s.mu.Lock()
	delete(s.purging, id)
	s.mu.Unlock()
}

// purgeNow removes the chunks of id within ctx. Chunks it fails to
// remove are unreachable, never read, and left to the sweeps.
func (s *Store) purgeNow(ctx context.Context, id string) {
	_ = s.b.Purge(ctx, chunkToken(id))
}

// read counts a reader of the chunks of id, which puts their purge off
// until done is called; done is safe to call more than once. It fails
// when their purge is under way: the reader might find some chunks and
// not the rest, and the object it read is gone.
func (s *Store) read(id string) (done func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.purging[id] {
		return nil, false
	}
	s.readers[id]++
	var once sync.Once
	return func() { once.Do(func() { s.unread(id) }) }, true
}

// unread ends a reader of the chunks of id, and purges them when they are
// owed and it was their last reader.
func (s *Store) unread(id string) {
	s.mu.Lock()
	s.readers[id]--
	if s.readers[id] > 0 {
		s.mu.Unlock()
		return
	}
	delete(s.readers, id)
	call, owed := s.owed[id]
	delete(s.owed, id)
	s.mu.Unlock()
	if owed {
		s.purge(call, id)
	}
}

// Get opens a reader of the object's chunks in the range.
func (s *Store) Get(ctx context.Context, key string, opts ports.GetObjectOptions) (io.ReadCloser, ports.ObjectInfo, error) {
	if err := objkey.CheckGet(key, opts); err != nil {
		return nil, ports.ObjectInfo{}, err
	}
	for range rounds {
		cur, err := s.current(ctx, key)
		if err != nil {
			return nil, ports.ObjectInfo{}, fmt.Errorf("get %w", err)
		}
		if !cur.live {
			return nil, ports.ObjectInfo{}, fmt.Errorf("get %q: %w", key, ports.ErrNotFound)
		}
		offset, length, err := objkey.Span(key, opts, int64(cur.info.Size))
		if err != nil {
			return nil, ports.ObjectInfo{}, err
		}
		r := &reader{
			ctx: ctx, b: s.b, key: key, info: cur.info, skip: offset, left: length,
			seq: 1, whole: offset == 0 && length == int64(cur.info.Size), h: sha256.New(),
		}
		if length == 0 {
			return r, describe(key, cur.info), nil
		}
		// The chunks are counted as read before the first is: a Put or
		// Delete that replaces the object from then on leaves them until
		// the reader ends, which it does at its end, at an error, at
		// Close, or when the Get's context ends.
		done, ok := s.read(cur.info.NUID)
		if !ok {
			continue // replaced, and its chunks on their way out
		}
		stop := context.AfterFunc(ctx, done)
		r.done = func() {
			stop()
			done()
		}
		// The first chunk is read before Get answers. A Put that replaced
		// the object after its description was read has purged the
		// chunks, and the answer would be "not found" for an object that
		// never went; the description read again is the object now.
		err = r.next()
		if errors.Is(err, ports.ErrNotFound) {
			r.done()
			continue
		}
		if err != nil {
			r.done()
			return nil, ports.ObjectInfo{}, err
		}
		return r, describe(key, cur.info), nil
	}
	return nil, ports.ObjectInfo{}, fmt.Errorf("get %q: it was replaced %d times while its first chunk was read", key, rounds)
}

// reader reads an object's chunks one at a time from the leader.
type reader struct {
	ctx   context.Context
	b     *jsbucket.Bucket
	key   string
	info  jetstream.ObjectInfo
	skip  int64 // bytes still to drop before the range
	left  int64 // bytes of the range still to return
	seq   uint64
	chunk []byte
	read  uint32 // chunks read
	whole bool   // the range is the object: check its digest at the end
	h     hash.Hash
	err   error
	// done ends the store's count of this reader of the chunks; nil for
	// a reader of no chunks.
	done func()
}

// end ends the reader with err, and its hold on the chunks.
func (r *reader) end(err error) {
	r.err, r.chunk = err, nil
	if r.done != nil {
		r.done()
	}
}

func (r *reader) Read(p []byte) (int, error) {
	for len(r.chunk) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if r.left == 0 {
			r.end(r.finish())
			continue
		}
		if err := r.next(); err != nil {
			r.end(err)
		}
	}
	n := copy(p, r.chunk[:min(int64(len(r.chunk)), r.left)])
	r.chunk, r.left = r.chunk[n:], r.left-int64(n)
	if r.left == 0 {
		r.chunk = nil
	}
	return n, nil
}

// next loads the next chunk, dropping what lies before the range. The
// first load of a range that starts past the first chunk seeks to it.
func (r *reader) next() error {
	if r.read == r.info.Chunks {
		return fmt.Errorf("get %q: %d chunks read, %d bytes short: %w", r.key, r.read, r.left, io.ErrUnexpectedEOF)
	}
	var (
		m   jsbucket.Msg
		err error
	)
	if k := uint32(r.skip / chunkSize); r.read == 0 && k > 0 && !r.whole {
		m, err = r.seek(k)
	} else {
		m, err = r.b.Next(r.ctx, chunkToken(r.info.NUID), r.seq)
	}
	if err != nil {
		return fmt.Errorf("get %q: %w", r.key, err)
	}
	if m.Seq == 0 {
		return fmt.Errorf("get %q: chunk %d of %d is gone (the object was replaced or deleted while read): %w",
			r.key, r.read+1, r.info.Chunks, ports.ErrNotFound)
	}
	if i, ok := chunkIndex(m); ok && i > r.read {
		// Sought past the chunks before the range.
		r.skip -= int64(i-r.read) * chunkSize
		r.read = i
	}
	r.seq, r.read = m.Seq+1, r.read+1
	if r.whole {
		r.h.Write(m.Data)
	}
	drop := min(int64(len(m.Data)), r.skip)
	r.skip -= drop
	r.chunk = m.Data[drop:]
	return nil
}

// chunkIndex is a chunk's number, when its writer numbered it.
func chunkIndex(m jsbucket.Msg) (uint32, bool) {
	i, err := strconv.ParseUint(m.Header.Get(headerChunk), 10, 32)
	return uint32(i), err == nil
}

// seek finds chunk k by its number: the chunks of one Put have growing
// sequences, mostly one after another, so a guess between two known chunks
// by their numbers lands on it or narrows the search. Chunks another
// writer made carry no number: those are read from the first.
func (r *reader) seek(k uint32) (jsbucket.Msg, error) {
	token := chunkToken(r.info.NUID)
	lo, err := r.b.Next(r.ctx, token, 1)
	if err != nil || lo.Seq == 0 {
		return lo, err
	}
	hi, err := r.b.LastMsg(r.ctx, token)
	if err != nil || hi.Seq == 0 {
		return hi, err
	}
	ilo, okLo := chunkIndex(lo)
	ihi, okHi := chunkIndex(hi)
	if !okLo || !okHi || ilo != 0 || k > ihi {
		return lo, nil
	}
	for {
		switch {
		case ilo == k:
			return lo, nil
		case ihi == k:
			return hi, nil
		}
		guess := lo.Seq + max(1, (hi.Seq-lo.Seq)*uint64(k-ilo)/uint64(ihi-ilo))
		m, err := r.b.Next(r.ctx, token, min(guess, hi.Seq))
		if err != nil || m.Seq == 0 {
			return m, err
		}
		i, ok := chunkIndex(m)
		switch {
		case !ok:
			return lo, nil
		case i == k:
			return m, nil
		case i < k:
			lo, ilo = m, i
		case m.Seq == hi.Seq:
			// Every chunk before hi lies below the guess: walk to k.
			return r.walk(token, lo, k)
		default:
			hi, ihi = m, i
		}
	}
}

// walk reads chunk after chunk from m until chunk k.
func (r *reader) walk(token string, m jsbucket.Msg, k uint32) (jsbucket.Msg, error) {
	for {
		i, ok := chunkIndex(m)
		if !ok || i >= k {
			return m, nil
		}
		next, err := r.b.Next(r.ctx, token, m.Seq+1)
		if err != nil || next.Seq == 0 {
			return next, err
		}
		m = next
	}
}

// finish checks, at the end of a whole object, that its digest is the
// stored one.
func (r *reader) finish() error {
	if r.whole && digest(r.h) != r.info.Digest {
		return fmt.Errorf("get %q: the content read does not match its digest %s", r.key, r.info.Digest)
	}
	return io.EOF
}

// Close ends the read; the reader holds no resource on the broker.
func (r *reader) Close() error {
	r.end(io.ErrClosedPipe)
	return nil
}

// Stat describes the object.
func (s *Store) Stat(ctx context.Context, key string) (ports.ObjectInfo, error) {
	if err := objkey.Check(key); err != nil {
		return ports.ObjectInfo{}, err
	}
	cur, err := s.current(ctx, key)
	if err != nil {
		return ports.ObjectInfo{}, fmt.Errorf("stat %w", err)
	}
	if !cur.live {
		return ports.ObjectInfo{}, fmt.Errorf("stat %q: %w", key, ports.ErrNotFound)
	}
	return describe(key, cur.info), nil
}

// Delete marks the description deleted, conditioned on the one read, then
// purges the chunks. A caller that gives up once the deletion is sent ends
// its sending: the Delete then reads, within 5 s, whether it was stored,
// and purges the chunks if it was.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := objkey.Check(key); err != nil {
		return err
	}
	deleted, err := s.deleteWhere(ctx, "delete", key, func(jetstream.ObjectInfo) bool { return true })
	if err != nil {
		return err
	}
	if !deleted {
		return fmt.Errorf("delete %q: %w", key, ports.ErrNotFound)
	}
	return nil
}

var _ ports.ConditionalObjectDeleter = (*Store)(nil)

// DeleteIfMatch implements ports.ConditionalObjectDeleter as Delete does:
// the deletion is written conditioned on the revision of the description
// whose digest matched, as a Put with IfMatch writes its own, so a
// description written since fails it; the description is then read again
// and compared anew.
func (s *Store) DeleteIfMatch(ctx context.Context, key, etag string) (bool, error) {
	if err := objkey.CheckDeleteIfMatch(key, etag); err != nil {
		return false, err
	}
	return s.deleteWhere(ctx, "delete if the ETag matches", key, func(info jetstream.ObjectInfo) bool { return info.Digest == etag })
}

// deleteWhere deletes key's object if it is live and match says so of
// its description, and reports whether it did; op names the call in its
// errors.
func (s *Store) deleteWhere(ctx context.Context, op, key string, match func(jetstream.ObjectInfo) bool) (bool, error) {
	end, err := s.begin(op, key)
	if err != nil {
		return false, err
	}
	defer end()
	if err := s.b.Fence(ctx); err != nil {
		return false, fmt.Errorf("%s %q: %w", op, key, err)
	}
	for range rounds {
		cur, err := s.current(ctx, key)
		if err != nil {
			return false, fmt.Errorf("%s %w", op, err)
		}
		if !cur.live || !match(cur.info) {
			return false, nil
		}
		gone := cur.info
		gone.Deleted, gone.Size, gone.Chunks, gone.Digest, gone.ModTime = true, 0, 0, "", time.Now().UTC()
		m := nats.NewMsg("")
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		if m.Data, err = json.Marshal(gone); err != nil {
			return false, fmt.Errorf("%s %q: %w", op, key, err)
		}
		if err := ctx.Err(); err != nil {
			return false, fmt.Errorf("%s %q: %w", op, key, err)
		}
		// Once sent, the deletion may be stored whatever becomes of the
		// caller, and then nothing but this call would purge the chunks. It
		// is not sent again after the caller gave up: sent once a lost
		// connection was back, it would delete, while a successor served,
		// an object the successor served. The Delete reads whether it
		// landed instead, and purges if it did.
		_, err = s.b.Publish(ctx, metaToken(key), m, &cur.revision)
		if errors.Is(err, jsbucket.ErrConflict) {
			continue // replaced meanwhile: judge what is there now
		}
		if err != nil && (refused(err) || ctx.Err() == nil ||
			s.landed(ctx, key, cur.revision, func(d jetstream.ObjectInfo) bool { return d.Deleted && d.NUID == gone.NUID }) != landedMine) {
			return false, fmt.Errorf("%s %q: %w", op, key, err)
		}
		s.purge(ctx, cur.info.NUID)
		return true, nil
	}
	return false, fmt.Errorf("%s %q: it changed %d times meanwhile: %w", op, key, rounds, ports.ErrConflict)
}

// List asks the leader for every object's name, keeps those after the
// cursor with the prefix in key order, and reads their descriptions until
// the page is full.
func (s *Store) List(ctx context.Context, prefix string, limit int, cursor string) ([]ports.ObjectInfo, string, error) {
	limit, err := storecheck.Limit("limit", limit)
	if err != nil {
		return nil, "", err
	}
	if err := objkey.CheckList(prefix, cursor); err != nil {
		return nil, "", err
	}
	tokens, err := s.b.Tokens(ctx, "M.>")
	if err != nil {
		return nil, "", fmt.Errorf("list %q: %w", prefix, err)
	}
	var keys []string
	for _, t := range tokens {
		raw, err := base64.URLEncoding.DecodeString(strings.TrimPrefix(t, "M."))
		if err != nil {
			continue // not a description the object store layout names
		}
		// A key stored before keys were held to objkey.Check (one with a
		// NUL) is left out: no call reaches it, and as a page's last key
		// it would be a cursor the next List refuses.
		if k := string(raw); strings.HasPrefix(k, prefix) && k > cursor && objkey.Check(k) == nil {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	out := make([]ports.ObjectInfo, 0, min(limit, len(keys)))
	for i, k := range keys {
		cur, err := s.current(ctx, k)
		if err != nil {
			return nil, "", fmt.Errorf("list %q: %w", prefix, err)
		}
		if !cur.live {
			continue
		}
		out = append(out, describe(k, cur.info))
		if len(out) == limit {
			if i == len(keys)-1 {
				return out, "", nil
			}
			return out, k, nil
		}
	}
	return out, "", nil
}
