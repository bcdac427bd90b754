package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

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

func (w *written) write(_ context.Context, t term, batch []*setReq) error {
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

// Sets that queue while the writer is busy go in one batch, each under
// its own term, and each caller gets its batch's outcome.
func TestSetsThatQueueGoTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &written{}
		w := newSetter(0, rec.write) // no writer yet: every set queues
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

// A batch's failure is each of its sets'; a set whose caller gave up
// before the batch was written is left out of it.
func TestABatchAnswersEachSet(t *testing.T) {
	rec := &written{err: ports.ErrFenced}
	w := &setter{write: rec.write}
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

// A batch's statement runs to the latest deadline among its callers, or
// to a ceiling when one has none, and no caller's cancellation ends it.
func TestABatchOutlivesItsFirstCaller(t *testing.T) {
	soon, cancelSoon := context.WithTimeout(t.Context(), time.Minute)
	defer cancelSoon()
	later, cancelLater := context.WithTimeout(t.Context(), time.Hour)
	defer cancelLater()
	ctx, cancel := batchContext([]*setReq{{ctx: soon}, {ctx: later}})
	defer cancel()
	want, _ := later.Deadline()
	if d, ok := ctx.Deadline(); !ok || !d.Equal(want) {
		t.Fatalf("batch deadline %v, %v; want the later caller's, %v", d, ok, want)
	}
	cancelSoon()
	if ctx.Err() != nil {
		t.Fatal("the first caller's cancellation ended the batch")
	}
	ctx, cancel = batchContext([]*setReq{{ctx: soon}, {ctx: t.Context()}})
	defer cancel()
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > batchCeiling {
		t.Fatalf("a batch with a caller without a deadline ends at %v, %v; want within %v", d, ok, batchCeiling)
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
	batch := []*setReq{
		{key: "k", value: []byte("first")},
		{key: "j", value: []byte("other"), us: ttl},
		{key: "k", value: []byte("second")},
	}
	for _, under := range []term{{}, {token: 4, termed: true}} {
		if err := s.writeSets(t.Context(), under, batch); err != nil {
			t.Fatalf("a batch with k twice under %+v: %v", under, err)
		}
		for key, want := range map[string]string{"k": "second", "j": "other"} {
			if v, err := s.Get(t.Context(), key); err != nil || string(v) != want {
				t.Fatalf("%s after the batch = %q, %v; want %q", key, v, err, want)
			}
		}
	}
	err = s.writeSets(t.Context(), term{token: 3, termed: true}, batch[:1])
	if !errors.Is(err, ports.ErrFenced) {
		t.Fatalf("a batch under an older term: %v, want ErrFenced", err)
	}
}
