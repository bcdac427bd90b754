package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/abi-engine/engine/internal/pgdb"
	"github.com/abi-engine/engine/ports"
)

// Sets that arrive while others are being written go to the server
// together: one statement and one commit for all of them, where each set
// alone costs a commit and, under a serving term, a check of the fence.
// A set never waits for others to arrive; it waits only for a connection,
// as it would anyway, and whatever queued meanwhile goes with it. A batch
// takes its connection before it takes its sets, so a caller that gives
// up while the batch waits for one is told its set was not written. Each
// caller is answered once its batch has committed. A batch the server
// refuses is sent again one set at a time, so that a set refused for a
// cause of its own fails alone (ADR 0013).

// setBatchMax is the most sets one statement writes.
const setBatchMax = 128

// setBatchBytes is the most bytes of keys and values a batch takes more
// sets on after its first, so that sets of large values go in several
// statements: 128 sets of 8 MiB, which the HTTP API takes, would be one of
// 1 GiB, more than pgx sends, and every set of it would fail.
const setBatchBytes = 16 << 20

// setReq is one Set waiting to be written.
type setReq struct {
	ctx   context.Context
	key   string
	value []byte
	us    *int64 // micros(ttl)
	done  chan error
	// state is setQueued until a writer, holding a connection to send
	// it on, takes the set into a batch (setTaken) or it is dropped, its
	// caller having given up first or no connection having come for its
	// batch (setDropped). Only a set taken is ever
	// sent to the server. A set of a batch the server refused, which
	// wrote nothing, is queued again until it is taken alone.
	state atomic.Int32
}

// The states of a setReq.
const (
	setQueued int32 = iota
	setTaken
	setDropped
)

// notWritten is the error of a set whose caller gave up, with err, before
// it was sent: it surely did not reach the table (ports.ErrNotDone).
func notWritten(err error) error {
	return fmt.Errorf("not written: %w: its caller gave up before it was sent: %w", ports.ErrNotDone, err)
}

// setter writes queued sets, on as many goroutines as the pool has
// connections.
type setter struct {
	reqs      chan *setReq
	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
	// conn takes the connection a batch goes on; write writes one batch
	// of sets under one term on it, releases it, and reports the batch's
	// outcome. conn fails as ports.ErrNotDone, since no set was sent.
	conn  func(ctx context.Context) (*pgxpool.Conn, error)
	write func(ctx context.Context, c *pgxpool.Conn, t term, batch []*setReq) error
	// ceiling bounds a batch whose callers set no deadline, as it bounds
	// every other statement of the store, so that a server that never
	// answers cannot hold the store's Close for ever.
	ceiling pgdb.Ceiling
}

// term is the serving term a set carries, if any (ports.FencingToken).
type term struct {
	token  uint64
	termed bool
}

func newSetter(workers int, ceiling pgdb.Ceiling, conn func(context.Context) (*pgxpool.Conn, error), write func(context.Context, *pgxpool.Conn, term, []*setReq) error) *setter {
	w := &setter{reqs: make(chan *setReq), closed: make(chan struct{}), conn: conn, write: write, ceiling: ceiling}
	for range workers {
		w.wg.Go(w.run)
	}
	return w
}

// errClosed is the error of a set on a closed store.
var errClosed = errors.New("the store is closed")

// set queues one set and waits for its outcome, or for ctx. A caller that
// gives up is told the truth as far as it is known: its set's outcome if
// it has one, that it was not written if it was never sent, and otherwise
// its context's error alone, since the set may still land.
func (w *setter) set(ctx context.Context, key string, value []byte, us *int64) error {
	r := &setReq{ctx: ctx, key: key, value: value, us: us, done: make(chan error, 1)}
	select {
	case w.reqs <- r:
	case <-w.closed:
		return errClosed
	case <-ctx.Done():
		return notWritten(ctx.Err())
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
	}
	if r.state.CompareAndSwap(setQueued, setDropped) {
		return notWritten(ctx.Err())
	}
	if r.state.Load() == setDropped {
		return <-r.done // the writer dropped it, and answers at once
	}
	select {
	case err := <-r.done:
		return err
	default:
		// As with a query cancelled in flight, the set may still land.
		return ctx.Err()
	}
}

// close stops the goroutines once their batches are written.
func (w *setter) close() {
	w.closeOnce.Do(func() { close(w.closed) })
	w.wg.Wait()
}

func (w *setter) run() {
	batch := make([]*setReq, 0, setBatchMax)
	for {
		var size int
		select {
		case r := <-w.reqs:
			batch, size = append(batch[:0], r), len(r.key)+len(r.value)
		case <-w.closed:
			return
		}
	more:
		for len(batch) < setBatchMax && size < setBatchBytes {
			select {
			case r := <-w.reqs:
				batch, size = append(batch, r), size+len(r.key)+len(r.value)
			default:
				break more
			}
		}
		w.flush(batch)
		clear(batch)
	}
}

// flush writes batch, one statement per serving term among its sets (in
// practice one), and answers each set. A set whose caller has given up is
// left out, and was not written.
func (w *setter) flush(batch []*setReq) {
	byTerm := map[term][]*setReq{}
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			if r.state.CompareAndSwap(setQueued, setDropped) {
				r.done <- notWritten(err)
			}
			continue
		}
		if r.state.Load() != setQueued {
			continue // its caller has given up, and knows it was not written
		}
		var t term
		t.token, t.termed = ports.FencingToken(r.ctx)
		byTerm[t] = append(byTerm[t], r)
	}
	for t, sets := range byTerm {
		ctx, end := w.batchContext(sets)
		taken, err := w.send(ctx, t, sets)
		err = end(err)
		if len(taken) > 1 && refused(err) {
			w.alone(t, taken)
			continue
		}
		for _, r := range taken {
			r.done <- err
		}
	}
}

// send takes a connection, then takes into the batch each of sets whose
// caller has not given up meanwhile, and writes those under t on it; it
// returns the sets it answers for, each of which has the returned
// outcome. A set whose caller gave up first was not sent, and its caller
// knows it.
//
// When no connection comes, no set was sent: each still queued is
// dropped, not taken, and returned with the failure (ports.ErrNotDone) for
// its answer, so that a caller giving up at that moment finds its set
// dropped and waits for that answer. Taken, as the sets sent are, such a
// set could be found taken by its caller before its answer came, and the
// caller, told only its context's error, would take a set never sent for
// one that may land.
func (w *setter) send(ctx context.Context, t term, sets []*setReq) ([]*setReq, error) {
	c, err := w.conn(ctx)
	if err != nil {
		dropped := make([]*setReq, 0, len(sets))
		for _, r := range sets {
			if r.state.CompareAndSwap(setQueued, setDropped) {
				dropped = append(dropped, r)
			}
		}
		return dropped, err
	}
	taken := make([]*setReq, 0, len(sets))
	for _, r := range sets {
		if r.state.CompareAndSwap(setQueued, setTaken) {
			taken = append(taken, r)
		}
	}
	if len(taken) == 0 {
		c.Release()
		return nil, nil
	}
	return taken, w.write(ctx, c, t, taken)
}

// alone writes the sets of a batch the server refused, one statement each,
// so that each caller is answered as if its set had gone alone: the cause
// may have been one set's own (its value, a row another transaction held),
// and nothing of the batch was written. The sets of different keys go at
// once, as lone sets would, so that one waiting on a held row holds up no
// other; those of one key go in the order they queued, so the later still
// wins. Each statement runs under its caller's context, so one whose
// caller has given up ends at once, and is bounded by the store's ceiling
// as a batch is.
func (w *setter) alone(t term, sets []*setReq) {
	byKey := map[string][]*setReq{}
	for _, r := range sets {
		byKey[r.key] = append(byKey[r.key], r)
	}
	for _, r := range sets {
		r.state.Store(setQueued) // nothing of its batch was written
	}
	var keys sync.WaitGroup
	for _, sets := range byKey {
		keys.Go(func() {
			for _, r := range sets {
				if err := r.ctx.Err(); err != nil {
					if r.state.CompareAndSwap(setQueued, setDropped) {
						r.done <- notWritten(err)
					}
					continue
				}
				ctx, end := w.ceiling.Write(r.ctx)
				taken, err := w.send(ctx, t, []*setReq{r})
				if err = end(err); len(taken) == 1 {
					r.done <- err
				}
			}
		})
	}
	keys.Wait()
}

// refused reports whether the server refused a batch's statement, so that
// none of the batch was written, for a cause that may be one set's own.
// The fence is not such a cause: it refuses a term, and every set of the
// batch carries it; nor is any other failure of its check, such as the
// fence row waited for too long, which each set sent alone would meet
// again, one wait after another. An error that is not the server's (a
// connection lost, a context ended) leaves the batch's outcome unknown, or
// it was never sent, and its sets are not sent again, nor does one of the
// server's that ends the session (FATAL, PANIC), which may come after a
// commit (rolledBack).
func refused(err error) bool {
	return rolledBack(err) && !errors.Is(err, ports.ErrFenced) && !errors.Is(err, pgdb.ErrCheckFailed)
}

// batchContext is the context of a batch's statement: no caller's
// cancellation ends it, since the others still wait for it, but it ends
// at the latest deadline among them, and in any case at the store's
// ceiling (pgdb.Ceiling.Write), as every statement of the store does:
// callers who all wait an hour must not hold the batch's writer, and the
// sets queued behind it, for an hour on a server that does not answer.
// end ends the context and returns the batch's error, which says
// pgdb.ErrUnanswered when the ceiling cut it.
func (w *setter) batchContext(sets []*setReq) (_ context.Context, end func(error) error) {
	base := context.WithoutCancel(sets[0].ctx)
	var latest time.Time
	for _, r := range sets {
		d, ok := r.ctx.Deadline()
		if !ok {
			return w.ceiling.Write(base)
		}
		if d.After(latest) {
			latest = d
		}
	}
	ctx, cancel := context.WithDeadline(base, latest)
	ctx, bound := w.ceiling.Write(ctx)
	return ctx, func(err error) error {
		defer cancel()
		return bound(err)
	}
}

// setBatchSQL writes a batch of sets in one statement: keys, values and
// TTLs in micros go as three arrays, in the order the sets queued; of two
// sets of one key, the later wins, as if it had run after the other. Keys
// compare as the table's do (C collation), and rows are taken in key
// order, as every batch takes them, so two batches never wait on each
// other's rows in a cycle.
//
// $4, when not NULL, is how many milliseconds the statement may wait for a
// lock (lock_timeout, for its transaction alone, never longer than the
// server's own setting): the time left to the first of its callers to
// give up. A row another transaction holds then fails the batch, which
// wrote nothing and goes again set by set (setter.alone), where it would
// otherwise hold every set of the batch until the last caller gave up. It
// is set before the sort hands the insert its first row, so before any
// row is locked.
func setBatchSQL(table string) string {
	return `INSERT INTO ` + table + ` (key, value, expires_at)
		SELECT DISTINCT ON (k) k, v, clock_timestamp() + us * interval '1 microsecond'
		FROM unnest($1::text[] COLLATE "C", $2::bytea[], $3::bigint[]) WITH ORDINALITY AS s(k, v, us, n)
		WHERE (SELECT CASE WHEN $4::bigint IS NULL THEN true ELSE set_config('lock_timeout', least(
			coalesce(nullif(extract(epoch FROM current_setting('lock_timeout')::interval) * 1000, 0), $4), $4
		)::bigint::text, true) IS NOT NULL END)
		ORDER BY k, n DESC
		ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at`
}

// lockWaitFloor is the least a batch waits for a row lock, whatever its
// callers' deadlines: a hot key's row, which a concurrent batch holds for
// a few milliseconds under load, would otherwise fail the batch of a
// caller close to its deadline and send all its sets again one by one,
// just when the store is busiest.
const lockWaitFloor = 100 * time.Millisecond

// lockWait is how long a batch may wait for a row lock, in milliseconds:
// until the first of its callers gives up, at least lockWaitFloor and at
// most the most lock_timeout takes (about 24 days); nil, no bound of its
// own, when none of them has a deadline.
func lockWait(batch []*setReq) *int64 {
	var first time.Time
	for _, r := range batch {
		if d, ok := r.ctx.Deadline(); ok && (first.IsZero() || d.Before(first)) {
			first = d
		}
	}
	if first.IsZero() {
		return nil
	}
	ms := min(math.MaxInt32, int64((max(time.Until(first), lockWaitFloor)+time.Millisecond-1)/time.Millisecond))
	return &ms
}

// writeSets is the setter's write: one statement on c, checked against the
// fence when the sets carry a term.
func (s *Store) writeSets(ctx context.Context, c *pgxpool.Conn, t term, batch []*setReq) error {
	keys := make([]string, len(batch))
	values := make([][]byte, len(batch))
	us := make([]*int64, len(batch))
	for i, r := range batch {
		keys[i], values[i], us[i] = r.key, bytea(r.value), r.us
	}
	if t.termed {
		ctx = ports.WithFencingToken(ctx, t.token)
	}
	tag, err := s.writes.ExecOn(ctx, c, s.setBatchSQL, keys, values, us, lockWait(batch))
	if err != nil {
		if t.termed && errors.Is(err, ports.ErrFenced) {
			s.cache.End(t.token) // also when every caller has given up
		}
		return err
	}
	if want := distinct(keys); tag.RowsAffected() != int64(want) {
		return fmt.Errorf("wrote %d rows for %d keys", tag.RowsAffected(), want)
	}
	return nil
}

// distinct is how many different keys there are.
func distinct(keys []string) int {
	if len(keys) == 1 {
		return 1
	}
	seen := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		seen[k] = struct{}{}
	}
	return len(seen)
}
