package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/abi-engine/engine/internal/pgdb"
	"github.com/abi-engine/engine/internal/pgtest"
	"github.com/abi-engine/engine/internal/testenv"
	"github.com/abi-engine/engine/ports"
)

// written records the batches a setter hands to its write.
type written struct {
	mu      sync.Mutex
	batches [][]string // keys, per batch
	terms   []term
	err     error
}

func (w *written) write(_ context.Context, _ *pgxpool.Conn, t term, batch []*setReq) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	keys := make([]string, len(batch))
	for i, r := range batch {
		keys[i] = r.key
	}
	w.batches = append(w.batches, keys)
	w.terms = append(w.terms, t)
	return w.err
}

// noConn is the connection of a setter with no pool: releasing it does
// nothing.
func noConn(context.Context) (*pgxpool.Conn, error) { return new(pgxpool.Conn), nil }

// writeBatch writes batch under t on a connection of s's pool, as the
// setter of s would.
func writeBatch(s *Store, ctx context.Context, t term, batch []*setReq) error {
	c, err := s.writes.Conn(ctx)
	if err != nil {
		return err
	}
	return s.writeSets(ctx, c, t, batch)
}

// Sets that queue while the writer is busy go in one batch, each under
// its own term, and each caller gets its batch's outcome.
func TestSetsThatQueueGoTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &written{}
		w := newSetter(0, pgdb.DefaultCeiling, noConn, rec.write) // no writer yet: every set queues
		errs := make([]error, 10)
		var callers sync.WaitGroup
		for i := range errs {
			ctx := t.Context()
			if i%2 == 1 {
				ctx = ports.WithFencingToken(ctx, 7)
			}
			callers.Go(func() { errs[i] = w.set(ctx, fmt.Sprintf("k%d", i), []byte("v"), nil) })
		}
		synctest.Wait() // all ten wait to be taken
		w.wg.Go(w.run)
		callers.Wait()
		w.close()
		if len(rec.batches) != 2 {
			t.Fatalf("ten queued sets under two terms were written in %d batches: %v", len(rec.batches), rec.batches)
		}
		for i, keys := range rec.batches {
			if len(keys) != 5 {
				t.Fatalf("batch %d under %+v holds %v, want five sets", i, rec.terms[i], keys)
			}
		}
		if !slices.Contains(rec.terms, term{token: 7, termed: true}) || !slices.Contains(rec.terms, term{}) {
			t.Fatalf("batches under %+v, want one under term 7 and one under none", rec.terms)
		}
		for i, err := range errs {
			if err != nil {
				t.Fatalf("set %d: %v", i, err)
			}
		}
	})
}

// Sets of large values that queue together go in batches of a bounded
// size, not all in one: 128 sets of 8 MiB, which the HTTP API takes, are a
// statement of 1 GiB, which pgx refuses to send, failing every set of it,
// though each alone would be written.
func TestLargeSetsThatQueueGoInBatchesOfBoundedSize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var sizes []int
		w := newSetter(0, pgdb.DefaultCeiling, noConn, func(_ context.Context, _ *pgxpool.Conn, _ term, batch []*setReq) error {
			n := 0
			for _, r := range batch {
				n += len(r.key) + len(r.value)
			}
			mu.Lock()
			sizes = append(sizes, n)
			mu.Unlock()
			return nil
		})
		value := make([]byte, 8<<20)
		var callers sync.WaitGroup
		for i := range setBatchMax {
			callers.Go(func() {
				if err := w.set(t.Context(), fmt.Sprintf("k%d", i), value, nil); err != nil {
					t.Errorf("set %d: %v", i, err)
				}
			})
		}
		synctest.Wait() // all wait to be taken
		w.wg.Go(w.run)
		callers.Wait()
		w.close()
		for _, n := range sizes {
			if n > setBatchBytes+len(value)+16 {
				t.Fatalf("a batch of %d bytes, over %d and one set's; batches %v", n, setBatchBytes, sizes)
			}
		}
	})
}

// A batch's failure is each of its sets'; a set whose caller gave up
// before the batch was written is left out of it.
func TestABatchAnswersEachSet(t *testing.T) {
	rec := &written{err: ports.ErrFenced}
	w := &setter{conn: noConn, write: rec.write}
	gone, cancel := context.WithCancel(t.Context())
	cancel()
	left := &setReq{ctx: gone, key: "gone", done: make(chan error, 1)}
	a := &setReq{ctx: t.Context(), key: "a", done: make(chan error, 1)}
	b := &setReq{ctx: t.Context(), key: "b", done: make(chan error, 1)}
	w.flush([]*setReq{a, left, b})
	if len(rec.batches) != 1 || !slices.Equal(rec.batches[0], []string{"a", "b"}) {
		t.Fatalf("batches %v, want [[a b]]", rec.batches)
	}
	if err := <-left.done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the set whose caller gave up: %v, want context.Canceled", err)
	}
	for _, r := range []*setReq{a, b} {
		if err := <-r.done; !errors.Is(err, ports.ErrFenced) {
			t.Fatalf("set %q of a refused batch: %v, want ErrFenced", r.key, err)
		}
	}
}

// A batch that failed other than by the server's refusal (here the
// connection was lost) may have committed: its sets are not sent again,
// and each caller gets its error. One the server refused is sent again a
// set at a time.
func TestABatchOfUnknownOutcomeIsNotSentAgain(t *testing.T) {
	for _, c := range []struct {
		err    error
		writes int
	}{
		{io.ErrUnexpectedEOF, 1},
		// A FATAL error ends the session, maybe after a commit
		// (an administrator's termination, a server shutting down).
		{&pgconn.PgError{SeverityUnlocalized: "FATAL", Code: "57P01"}, 1},
		{&pgconn.PgError{SeverityUnlocalized: "ERROR", Code: "55P03"}, 3},
	} {
		rec := &written{err: c.err}
		w := &setter{conn: noConn, write: rec.write}
		a := &setReq{ctx: t.Context(), key: "a", done: make(chan error, 1)}
		b := &setReq{ctx: t.Context(), key: "b", done: make(chan error, 1)}
		w.flush([]*setReq{a, b})
		if len(rec.batches) != c.writes {
			t.Fatalf("a batch that failed with %v was written %d times: %v, want %d", c.err, len(rec.batches), rec.batches, c.writes)
		}
		for _, r := range []*setReq{a, b} {
			if err := <-r.done; !errors.Is(err, c.err) {
				t.Fatalf("set %q of a batch that failed with %v: %v", r.key, c.err, err)
			}
		}
	}
}

// A set whose caller's deadline is further off than PostgreSQL's
// lock_timeout can count (about 24 days) is written as any other.
func TestASetWithAFarDeadlineIsWritten(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	s, err := Open(t.Context(), Config{DSN: dsn, Table: pgtest.Table(t, dsn, "kvfar")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	far, cancel := context.WithTimeout(t.Context(), 30*24*time.Hour)
	defer cancel()
	if err := s.Set(far, "k", []byte("v"), 0); err != nil {
		t.Fatalf("a set with a deadline 30 days off: %v", err)
	}
	if v, err := s.Get(t.Context(), "k"); err != nil || string(v) != "v" {
		t.Fatalf("k = %q, %v; want v", v, err)
	}
}

// A batch's statement runs to the latest deadline among its callers, but
// never past the store's ceiling, which also ends it when one has none,
// and no caller's cancellation ends it.
func TestABatchOutlivesItsFirstCaller(t *testing.T) {
	soon, cancelSoon := context.WithTimeout(t.Context(), time.Minute)
	defer cancelSoon()
	later, cancelLater := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancelLater()
	w := &setter{ceiling: pgdb.Ceiling(time.Hour)}
	ctx, end := w.batchContext([]*setReq{{ctx: soon}, {ctx: later}})
	defer end(nil)
	want, _ := later.Deadline()
	if d, ok := ctx.Deadline(); !ok || !d.Equal(want) {
		t.Fatalf("batch deadline %v, %v; want the later caller's, %v", d, ok, want)
	}
	cancelSoon()
	if ctx.Err() != nil {
		t.Fatal("the first caller's cancellation ended the batch")
	}
	hour, cancelHour := context.WithTimeout(t.Context(), time.Hour)
	defer cancelHour()
	w.ceiling = pgdb.DefaultCeiling
	for name, callers := range map[string][]*setReq{
		"a caller without a deadline": {{ctx: soon}, {ctx: t.Context()}},
		"callers an hour off":         {{ctx: hour}, {ctx: hour}},
	} {
		ctx, end := w.batchContext(callers)
		defer end(nil)
		if d, ok := ctx.Deadline(); !ok || time.Until(d) > time.Duration(w.ceiling) {
			t.Errorf("a batch with %s ends at %v, %v; want within %v", name, d, ok, time.Duration(w.ceiling))
		}
	}
}

// On the server, one batch may hold two sets of one key: the later wins,
// and the statement does not fail on touching the row twice.
func TestABatchWithOneKeyTwice(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	s, err := Open(t.Context(), Config{DSN: dsn, Table: pgtest.Table(t, dsn, "kvbatch")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ttl := micros(time.Hour)
	ctx := t.Context()
	batch := []*setReq{
		{ctx: ctx, key: "k", value: []byte("first")},
		{ctx: ctx, key: "j", value: []byte("other"), us: ttl},
		{ctx: ctx, key: "k", value: []byte("second")},
	}
	for _, under := range []term{{}, {token: 4, termed: true}} {
		if err := writeBatch(s, t.Context(), under, batch); err != nil {
			t.Fatalf("a batch with k twice under %+v: %v", under, err)
		}
		for key, want := range map[string]string{"k": "second", "j": "other"} {
			if v, err := s.Get(t.Context(), key); err != nil || string(v) != want {
				t.Fatalf("%s after the batch = %q, %v; want %q", key, v, err, want)
			}
		}
	}
	err = writeBatch(s, t.Context(), term{token: 3, termed: true}, batch[:1])
	if !errors.Is(err, ports.ErrFenced) {
		t.Fatalf("a batch under an older term: %v, want ErrFenced", err)
	}
}

// queueSets gives s a setter with no writer yet, whose queue holds n sets,
// so that a test can see its sets queue and then have them written in one
// batch: start writes them.
func queueSets(s *Store, n int) (w *setter, start func()) {
	s.sets.close()
	w = newSetter(0, pgdb.DefaultCeiling, s.writes.Conn, s.writeSets)
	w.reqs = make(chan *setReq, n)
	s.sets = w
	return w, func() { w.wg.Go(w.run) }
}

// openWithKeyToHold opens a store on table through storeDSN and sets its
// key "held" to "v0", under the term token unless it is 0; it returns the
// store, the context its calls are made under, and a connection of its own
// to dsn, from which a test holds that key's row.
func openWithKeyToHold(t *testing.T, dsn, storeDSN, table string, token uint64) (*Store, context.Context, *pgx.Conn) {
	t.Helper()
	s, err := Open(t.Context(), Config{DSN: storeDSN, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	if token != 0 {
		ctx = ports.WithFencingToken(ctx, token)
	}
	if err := s.Set(ctx, "held", []byte("v0"), 0); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return s, ctx, conn
}

// setInOneBatch has s write, in one batch, each of good set to "v" under
// ctx and the set odd makes, each from a caller of its own, once all of
// them have queued; it returns their errors, good's in order and odd's
// last.
func setInOneBatch(t *testing.T, s *Store, ctx context.Context, good []string, odd func() error) []error {
	t.Helper()
	w, start := queueSets(s, len(good)+1)
	errs := make([]error, len(good)+1)
	var callers sync.WaitGroup
	for i, key := range good {
		callers.Go(func() { errs[i] = s.Set(ctx, key, []byte("v"), 0) })
	}
	callers.Go(func() { errs[len(good)] = odd() })
	for deadline := time.Now().Add(time.Minute); len(w.reqs) < len(errs); {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d sets queued", len(w.reqs), len(errs))
		}
		time.Sleep(time.Millisecond)
	}
	start()
	callers.Wait()
	return errs
}

// goodSetsWritten checks that each set of good, whose errors errs holds in
// order, succeeded and left its key reading "v" under ctx; with names the
// set they queued with.
func goodSetsWritten(t *testing.T, s *Store, ctx context.Context, good []string, errs []error, with string) {
	t.Helper()
	for i, key := range good {
		if errs[i] != nil {
			t.Errorf("the set of %q, which queued with %s: %v", key, with, errs[i])
			continue
		}
		if v, err := s.Get(ctx, key); err != nil || string(v) != "v" {
			t.Errorf("%q after its set = %q, %v; want %q", key, v, err, "v")
		}
	}
}

// A set the server refuses, for a cause of its own (a value a check
// constraint refuses, a row another transaction holds past lock_timeout),
// fails alone: the sets of other callers that queued with it, in one
// batch, are written and answered as if each had gone alone, with and
// without a term.
func TestOneRefusedSetDoesNotFailTheOthersOfItsBatch(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	// Every lock the store's statements wait on is given up after a while,
	// as a server configured so does.
	timed := dsn + sep + "options=-c%20lock_timeout%3D500ms"
	faults := map[string]struct {
		key, value string
		code       string // the SQLSTATE the refused set fails with
	}{
		"a value a check refuses":      {key: "refused", value: "refused", code: "23514"},
		"a row held past lock_timeout": {key: "held", value: "v", code: "55P03"},
	}
	for name, fault := range faults {
		for _, token := range []uint64{0, 5} {
			t.Run(fmt.Sprintf("%s, term %d", name, token), func(t *testing.T) {
				table := pgtest.Table(t, dsn, "kvalone")
				s, ctx, conn := openWithKeyToHold(t, dsn, timed, table, token)
				quoted := pgx.Identifier{table}.Sanitize()
				if _, err := conn.Exec(t.Context(), "ALTER TABLE "+quoted+" ADD CHECK (value <> 'refused'::bytea)"); err != nil {
					t.Fatal(err)
				}
				tx, err := conn.Begin(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
				if _, err := tx.Exec(t.Context(), "SELECT 1 FROM "+quoted+" WHERE key = 'held' FOR UPDATE"); err != nil {
					t.Fatal(err)
				}

				good := []string{"a", "k1", "k2", "z"}
				errs := setInOneBatch(t, s, ctx, good, func() error { return s.Set(ctx, fault.key, []byte(fault.value), 0) })

				var pgErr *pgconn.PgError
				if err := errs[len(good)]; !errors.As(err, &pgErr) || pgErr.Code != fault.code {
					t.Fatalf("the set of %q: %v, want SQLSTATE %s", fault.key, err, fault.code)
				}
				goodSetsWritten(t, s, ctx, good, errs, fmt.Sprintf("the set of %q", fault.key))
			})
		}
	}
}

// A set whose row another transaction holds, with no lock_timeout on the
// server, waits for it until its caller gives up; the sets of other
// callers that queued with it, in one batch, are written meanwhile, as
// they would have been alone, rather than wait with it until the last of
// them gives up. With and without a term.
func TestARowHeldElsewhereHoldsUpOnlyItsOwnSet(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	for _, token := range []uint64{0, 5} {
		t.Run(fmt.Sprintf("term %d", token), func(t *testing.T) {
			table := pgtest.Table(t, dsn, "kvheld")
			s, ctx, conn := openWithKeyToHold(t, dsn, dsn, table, token)
			tx, err := conn.Begin(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
			if _, err := tx.Exec(t.Context(), "SELECT 1 FROM "+pgx.Identifier{table}.Sanitize()+" WHERE key = 'held' FOR UPDATE"); err != nil {
				t.Fatal(err)
			}

			// The held set's caller gives up first; the others would wait
			// far longer, and are answered before they do.
			held, cancelHeld := context.WithTimeout(ctx, 10*time.Second)
			defer cancelHeld()
			patient, cancelPatient := context.WithTimeout(ctx, 45*time.Second)
			defer cancelPatient()
			good := []string{"a", "k1", "z"}
			errs := setInOneBatch(t, s, patient, good, func() error { return s.Set(held, "held", []byte("v1"), 0) })

			// Its caller gave up, or the server gave up waiting as it did.
			var pgErr *pgconn.PgError
			if err := errs[len(good)]; !errors.Is(err, context.DeadlineExceeded) && !(errors.As(err, &pgErr) && pgErr.Code == "55P03") {
				t.Fatalf("the set of the held row: %v, want DeadlineExceeded or a lock timeout", err)
			}
			goodSetsWritten(t, s, ctx, good, errs, "the set of a held row")
		})
	}
}

// A set whose caller gives up while it waits to be taken into a batch is
// never sent: its caller is told so (ports.ErrNotDone), with its context's
// error, and its key, whose value is known to be the one before, is kept
// again under the term, where a set of unknown outcome keeps it out.
func TestASetGivenUpBeforeItIsSentSaysItWasNotWritten(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	s, err := Open(t.Context(), Config{DSN: dsn, Table: pgtest.Table(t, dsn, "kvnotsent")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	term := ports.WithFencingToken(t.Context(), 3)
	if err := s.Set(term, "k", []byte("v0"), 0); err != nil {
		t.Fatal(err)
	}

	w, start := queueSets(s, 2)
	gone, cancel := context.WithCancel(term)
	answer := make(chan error, 1)
	go func() { answer <- s.Set(gone, "k", []byte("v1"), 0) }()
	for deadline := time.Now().Add(time.Minute); len(w.reqs) < 1; {
		if time.Now().After(deadline) {
			t.Fatal("the set did not queue")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	err = <-answer
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ports.ErrNotDone) || !strings.Contains(err.Error(), "not written") {
		t.Fatalf("a set given up before it was sent: %v, want context.Canceled and ErrNotDone, saying it was not written", err)
	}
	start()
	// The writer takes the given-up set first, and this one after it.
	if err := s.Set(term, "other", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Get(term, "k"); err != nil || string(v) != "v0" {
		t.Fatalf("k after a set given up before it was sent = %q, %v; want v0", v, err)
	}
	if _, kept, _ := s.QuickGet(term, "k"); !kept {
		t.Fatal("after a set that was not written, a read of its key is not kept")
	}
}

// A batch waits for a row lock until its first caller gives up, but never
// less than lockWaitFloor: a caller a few milliseconds from its deadline
// would otherwise split its batch over a row held for a moment. With no
// deadline among its callers, it has no bound of its own.
func TestABatchWaitsForARowLockAtLeastTheFloor(t *testing.T) {
	soon, cancelSoon := context.WithTimeout(t.Context(), 5*time.Millisecond)
	defer cancelSoon()
	later, cancelLater := context.WithTimeout(t.Context(), time.Hour)
	defer cancelLater()
	if ms := lockWait([]*setReq{{ctx: later}, {ctx: soon}}); ms == nil || *ms != lockWaitFloor.Milliseconds() {
		t.Fatalf("a batch with a caller 5 ms from its deadline waits %v ms for a lock, want %d", ms, lockWaitFloor.Milliseconds())
	}
	if ms := lockWait([]*setReq{{ctx: later}}); ms == nil || *ms < time.Hour.Milliseconds()-time.Minute.Milliseconds() {
		t.Fatalf("a batch whose caller has an hour waits %v ms for a lock, want about an hour", ms)
	}
	if ms := lockWait([]*setReq{{ctx: t.Context()}}); ms != nil {
		t.Fatalf("a batch with no deadline waits %d ms for a lock, want no bound of its own", *ms)
	}
}
