package domain_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/lease/memory"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/leasetest"
)

// The edges of the lease where a review found two engines could serve at
// once, or an engine could stop for nothing. Each test failed before its fix.

// watchOverlap samples, every fiftieth of a lease until stop is called, whether
// more than one of the engines may serve, and returns how often that was so.
func watchOverlap(engines ...*testEngine) (stop func() int) {
	var wg sync.WaitGroup
	done := make(chan struct{})
	overlaps := 0
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(L / 50):
			}
			serving := 0
			for _, e := range engines {
				if e.o.MayServe() {
					serving++
				}
			}
			if serving > 1 {
				overlaps++
			}
		}
	})
	return func() int {
		close(done)
		wg.Wait()
		return overlaps
	}
}

// A purge of the lease stream, or a bucket deleted and made anew, leaves a
// key with no history: nothing says the holder is gone, so whoever creates
// the key waits a lease, by when the old holder has fenced, whatever the
// rates of the two clocks within a factor of two.
func TestAKeyWithNoHistoryIsHeldALeaseBeforeServing(t *testing.T) {
	for _, c := range []struct {
		name  string
		empty func(*memory.Lease)
	}{
		{"Purged", (*memory.Lease).Purge},
		{"BucketMadeAnew", (*memory.Lease).Recreate},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := usedStore(t)
				a := newEngine(t, store, "a", "", testTiming())
				a.mustServe(t)
				defer a.kill()
				time.Sleep(L / 4) // a renewed a moment ago
				synctest.Wait()
				c.empty(store)
				b := newEngine(t, store, "b", "", testTiming())
				defer b.release(t)
				stop := watchOverlap(a, b)
				b.mustServe(t)
				time.Sleep(L)
				if n := stop(); n > 0 {
					t.Fatalf("a and b both may serve in %d samples (a: %s; b: %s)", n, a.path(), b.path())
				}
				if at, _ := b.when(domain.StateServing); at != L {
					t.Fatalf("b served %v after it claimed, want a lease (%s)", at, b.path())
				}
				wantState(t, a, domain.StateLost)
			})
		})
	}
}

// A holder whose renewal finds the key deleted creates it again and waits
// a lease before serving, counted from when it saw the key empty: an
// engine that took the lease before the delete renewed last before it, so it
// stops within half a lease of the delete, not of the renewal's start.
func TestARecreatingHolderWaitsFromWhenItSawTheDelete(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "", testTiming())
		a.mustServe(t)
		defer a.release(t)
		deletedAt := deleteDuringRenewal(t, a, store)
		time.Sleep(2 * L)
		wantState(t, a, domain.StateServing)
		at, _ := a.when(domain.StateServing)
		if at < deletedAt+L {
			t.Fatalf("a served again at %v, less than a lease after the delete at %v (%s)", at, deletedAt, a.path())
		}
	})
}

// deleteDuringRenewal deletes the key while a's renewal at L/4 is on its
// way (its update reaches the store an eighth of a lease after it starts),
// so that the renewal finds the key gone and makes it anew. It returns
// when, since a started, the key was deleted.
func deleteDuringRenewal(t *testing.T, a *testEngine, store *memory.Lease) time.Duration {
	t.Helper()
	a.store.Delay(L/8, 0)
	time.Sleep(L/4 + L/16)
	deletedAt := time.Since(a.start)
	deleteKey(t, store)
	time.Sleep(L / 16)
	a.store.Delay(0, 0)
	return deletedAt
}

// A standby that takes the key over a deletion waits a lease before it
// serves; if another engine takes the lease meanwhile, the standby has lost
// it, and lost is the end: AwaitLease fails instead of trying again.
func TestLostWhileWaitingToServeIsTheEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "v1", testTiming())
		a.mustServe(t)
		defer a.kill()
		b := newEngine(t, store, "b", "v2", testTiming())
		defer b.release(t)
		if out, _ := b.claim(t, domain.RoleServe); out != domain.OutcomeStandby {
			t.Fatalf("Claim = %v, want standby", out)
		}
		done, stop := b.awaitInBackground()
		defer stop()
		other := domain.Holder{InstanceID: domain.NewInstanceID(), Host: "other", RolloutID: "v3"}
		for range 2 {
			// The key goes; b creates it and waits; another engine writes
			// over b's record before b serves.
			rec, _ := store.Read(context.Background())
			if rec.Present {
				if err := store.Delete(context.Background(), rec.Revision); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(L / 8)
			rec, _ = store.Read(context.Background())
			if rec.Holder.InstanceID != b.o.Me().InstanceID {
				break
			}
			if _, err := store.Update(context.Background(), other, rec.Revision); err != nil {
				t.Fatal(err)
			}
			time.Sleep(L / 2)
		}
		select {
		case err := <-done:
			if !errors.Is(err, domain.ErrLeaseLost) {
				t.Fatalf("AwaitLease = %v, want ErrLeaseLost", err)
			}
		case <-time.After(3 * L):
			t.Fatalf("AwaitLease still waits after the lease was lost (%s)", b.path())
		}
		wantState(t, b, domain.StateLost)
	})
}

// A takeover whose write went through but whose reply was lost is the
// standby's own record when it reads the lease again: it serves, instead of
// failing with its own name as the holder.
func TestATakeoverWhoseReplyWasLostServes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "v1", testTiming())
		a.mustServe(t)
		b := newEngine(t, store, "b", "v2", testTiming())
		defer b.release(t)
		if out, _ := b.claim(t, domain.RoleServe); out != domain.OutcomeStandby {
			t.Fatalf("Claim = %v, want standby", out)
		}
		done, stop := b.awaitInBackground()
		defer stop()
		time.Sleep(L / 10)
		b.store.LoseReplies(1)
		a.release(t)
		if err := <-done; err != nil {
			t.Fatalf("AwaitLease: %v (%s)", err, b.path())
		}
		wantState(t, b, domain.StateServing)
		rec, _ := store.Read(context.Background())
		if rec.Holder.InstanceID != b.o.Me().InstanceID {
			t.Fatalf("lease held by %s, want b", rec.Holder)
		}
	})
}

// The same for a claim: a create whose reply was lost is recognised.
func TestAClaimWhoseReplyWasLostServes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		b := newEngine(t, store, "b", "", testTiming())
		defer b.release(t)
		b.store.LoseReplies(1)
		b.mustServe(t)
	})
}

// suspendClock is the machine's clock as a holder should read it: it goes on
// while the machine is suspended, when Go's monotonic clock and every timer
// stand still.
type suspendClock struct {
	mu        sync.Mutex
	suspended time.Duration
}

func (c *suspendClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.suspended)
}

// suspend is a suspend of d, seen after the machine resumes: no goroutine ran
// and no timer moved meanwhile, but the clock went on.
func (c *suspendClock) suspend(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.suspended += d
}

// A holder resumed from a suspend longer than its lease does not serve: its
// renewal deadline is judged on a clock that counted the suspend.
func TestAHolderResumedFromSuspendDoesNotServe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		clock := &suspendClock{}
		a := newEngine(t, store, "a", "", testTiming(), domain.WithClock(clock))
		a.mustServe(t)
		defer a.kill()
		time.Sleep(L / 10)
		synctest.Wait()
		clock.suspend(2 * L)
		if a.o.MayServe() {
			t.Fatalf("a may serve right after a suspend of %v", 2*L)
		}
		// The keeper learns of it at its next timer, fences, and renews.
		time.Sleep(L / 4)
		if at, ok := a.when(domain.StateFenced); !ok {
			t.Fatalf("a never fenced after the suspend (%s, fenced at %v)", a.path(), at)
		}
	})
}

// onMessage is a log handler that runs f, in the logging goroutine, when a
// record's message contains msg: a way to look at the holder at the very
// point it logs.
type onMessage struct {
	msg string
	f   func()
}

func (h onMessage) Enabled(context.Context, slog.Level) bool { return true }
func (h onMessage) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.msg) {
		h.f()
	}
	return nil
}
func (h onMessage) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h onMessage) WithGroup(string) slog.Handler      { return h }

// A holder that makes the deleted key anew holds it under a new term, and
// may serve under it only after the quarantine. Before, for the moment
// between taking the new term and settling its state, Term reported the
// new term as one it may serve under, so a call could be admitted, and
// carry the new token, before the old holder had surely fenced.
func TestARecreatedTermAdmitsNothingBeforeItsQuarantine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		var a *testEngine
		var mu sync.Mutex
		var seen []bool // what Term said each time the key was made anew
		a = newEngine(t, store, "a", "", testTiming(), domain.WithLogger(slog.New(onMessage{
			msg: "the lease key was deleted",
			f: func() {
				_, ok := a.o.Term()
				mu.Lock()
				defer mu.Unlock()
				seen = append(seen, ok)
			},
		})))
		a.mustServe(t)
		defer a.release(t)
		before, _ := a.o.Term()
		deleteDuringRenewal(t, a, store)
		time.Sleep(2 * L)
		mu.Lock()
		defer mu.Unlock()
		if len(seen) == 0 {
			t.Fatal("the holder never made the deleted key anew")
		}
		for i, ok := range seen {
			if ok {
				t.Fatalf("when it made the key anew (%d), the holder's Term said it may serve before the quarantine", i)
			}
		}
		if after, ok := a.o.Term(); !ok || after <= before {
			t.Fatalf("after the quarantine: Term = %d, %v; want a term newer than %d that may serve", after, ok, before)
		}
	})
}

// gate holds calls, once held, until they are let go.
type gate struct {
	mu      sync.Mutex
	open    chan struct{} // nil: calls go through
	entered chan struct{} // a held call has come
}

func (g *gate) hold() (entered <-chan struct{}, letGo func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	open := make(chan struct{})
	g.open, g.entered = open, make(chan struct{}, 1)
	return g.entered, func() { close(open) }
}

// pass is where a call waits while the gate holds.
func (g *gate) pass() {
	g.mu.Lock()
	open, entered := g.open, g.entered
	g.mu.Unlock()
	if open == nil {
		return
	}
	select {
	case entered <- struct{}{}:
	default:
	}
	<-open
}

// heldReads is a lease whose reads, once held, wait to be let go and then
// answer whatever their caller did meanwhile: a reply already on its way
// when the caller gave up.
type heldReads struct {
	domain.Lease
	gate
}

func (h *heldReads) Read(ctx context.Context) (domain.Record, error) {
	h.pass()
	return h.Lease.Read(context.Background())
}

// A holder stopped while its renewal is learning that another engine took
// the lease must not release that engine's record. Before the fix the
// renewal's verdict was dropped on the way out, the holder kept the
// successor's record as its own, and Release wrote "released" over it, so
// a standby of the next release took the lease beside the successor.
func TestAStopDuringARenewalThatFindsASuccessorReleasesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		view := &heldReads{Lease: store}
		a := newEngine(t, view, "a", "v1", testTiming())
		a.mustServe(t)
		a.store.Cut(true) // a is silent and fences; b takes over after a lease
		b := newEngine(t, store, "b", "v1", testTiming())
		b.mustServe(t)
		defer b.release(t)
		taken, _ := store.Read(context.Background())

		reading, letGo := view.hold()
		a.store.Cut(false)
		select {
		case <-reading: // a's renewal met b's revision and reads who holds it
		case <-time.After(L):
			t.Fatalf("a never renewed after the cut: %s", a.path())
		}
		released := make(chan error, 1)
		go func() { released <- a.o.Release(context.Background()) }()
		synctest.Wait() // Release has stopped the renewals and waits for the one in flight
		letGo()
		if err := <-released; err != nil {
			t.Fatalf("Release: %v", err)
		}
		rec, _ := store.Read(context.Background())
		if rec.Revision != taken.Revision || rec.Holder.InstanceID != b.o.Me().InstanceID || rec.Holder.Released {
			t.Fatalf("a's release wrote over b's lease: it reads %+v at revision %d, want b's record at %d (a: %s)",
				rec.Holder, rec.Revision, taken.Revision, a.path())
		}
		if a.o.MayServe() {
			t.Fatalf("a may still serve: %s", a.path())
		}
		// Its renewal's verdict was heard: the hold ended as lost.
		wantState(t, a, domain.StateLost)
	})
}

// recreatedUnderASuccessor brings a to the moment its renewal makes anew a
// key an operator deleted under b, while b, cut off since its last
// renewal, may still serve: the case the quarantine is for. lose says how
// a's create goes out, before a's store is reached again.
func recreatedUnderASuccessor(t *testing.T, store *memory.Lease, a *testEngine, lose func()) (b *testEngine) {
	t.Helper()
	a.mustServe(t)
	a.store.Cut(true) // a is silent; b takes over after a lease
	b = newEngine(t, store, "b", "", testTiming())
	b.mustServe(t)
	time.Sleep(L/4 + time.Millisecond) // b renewed a moment ago
	synctest.Wait()
	b.store.Cut(true) // and serves on until half a lease after that
	rec, _ := store.Read(context.Background())
	if rec.Holder.InstanceID != b.o.Me().InstanceID {
		t.Fatalf("lease held by %s, want b", rec.Holder)
	}
	if err := store.Delete(context.Background(), rec.Revision); err != nil {
		t.Fatal(err)
	}
	lose()
	a.store.Cut(false)
	return b
}

// A standby of the next release claims after a has released: it must not
// serve while b still may.
func wantNoHandoverBeside(t *testing.T, store *memory.Lease, a, b *testEngine) {
	t.Helper()
	if a.o.HandedOver() {
		t.Fatalf("a says it handed over a key it made anew under b (a: %s)", a.path())
	}
	c := newEngine(t, store, "c", "v2", testTiming())
	defer c.release(t)
	if out, _ := c.claim(t, domain.RoleServe); out == domain.OutcomeServe && b.o.MayServe() && c.o.MayServe() {
		t.Fatalf("b and c both may serve: a handed over a key it made anew under b (a: %s; b: %s; c: %s)",
			a.path(), b.path(), c.path())
	}
}

// A renewal that makes the key anew and never hears back (the reply lost)
// has, for all the holder knows, a key of its own in quarantine. Before the
// fix, Release read that record back, took it for a renewal whose reply was
// lost, and wrote it released: the next release's standby took it at once
// beside b.
func TestARecreateWhoseReplyWasLostIsNotHandedOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "", testTiming())
		b := recreatedUnderASuccessor(t, store, a, func() { a.store.LoseReplies(1) })
		defer b.kill()
		time.Sleep(L / 8)
		synctest.Wait()
		if rec, _ := store.Read(context.Background()); rec.Holder.InstanceID != a.o.Me().InstanceID {
			t.Fatalf("a did not make the key anew: %+v (%s)", rec, a.path())
		}
		a.release(t)
		wantNoHandoverBeside(t, store, a, b)
	})
}

// heldCreates is a lease whose creates land at once and whose replies,
// once held, wait to be let go: a reply on its way when its caller gives
// up.
type heldCreates struct {
	domain.Lease
	gate
}

func (h *heldCreates) Create(ctx context.Context, holder domain.Holder) (uint64, error) {
	rev, err := h.Lease.Create(context.Background(), holder)
	h.pass()
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	return rev, err
}

// The same when Release itself cuts the renewal short while its create is
// on the way: the more likely way to miss the reply.
func TestARecreateCutShortByReleaseIsNotHandedOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		view := &heldCreates{Lease: store}
		a := newEngine(t, view, "a", "", testTiming())
		var creating <-chan struct{}
		var letGo func()
		b := recreatedUnderASuccessor(t, store, a, func() { creating, letGo = view.hold() })
		defer b.kill()
		select {
		case <-creating:
		case <-time.After(L / 4):
			t.Fatalf("a never made the key anew: %s", a.path())
		}
		released := make(chan error, 1)
		go func() { released <- a.o.Release(context.Background()) }()
		synctest.Wait() // Release stopped the renewals and waits for this one
		letGo()
		if err := <-released; err != nil {
			t.Fatalf("Release: %v", err)
		}
		wantNoHandoverBeside(t, store, a, b)
	})
}

// failedCreates is a lease whose next creates fail without landing, and
// which notes when each create lands.
type failedCreates struct {
	domain.Lease
	mu     sync.Mutex
	fail   int
	landed []time.Time
}

func (f *failedCreates) failNext(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = n
}

func (f *failedCreates) Create(ctx context.Context, holder domain.Holder) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail > 0 {
		f.fail--
		return 0, leasetest.ErrFault
	}
	rev, err := f.Lease.Create(ctx, holder)
	if err == nil {
		f.landed = append(f.landed, time.Now())
	}
	return rev, err
}

// A create that failed leaves a doubt (it may have landed); one that
// answers later settles it. Before that was so, the doubt outlived the
// answer: a renewal whose reply was then lost read our record back and
// counted the quarantine from the failed create, earlier than the one that
// made the key, so the holder served before its quarantine was over.
func TestAnAnsweredCreateSettlesAnEarlierFailedOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		view := &failedCreates{Lease: store}
		a := newEngine(t, view, "a", "", testTiming())
		a.mustServe(t)
		defer a.release(t)
		time.Sleep(L / 8)
		deleteKey(t, store)
		view.failNext(1) // the renewal at L/4 finds the key gone and fails to make it
		time.Sleep(L/4 + L/8)
		synctest.Wait()
		view.mu.Lock()
		landed := append([]time.Time(nil), view.landed...)
		view.mu.Unlock()
		if len(landed) != 1 {
			t.Fatalf("a made the key %d times by %v, want once (%s)", len(landed), time.Since(a.start), a.path())
		}
		a.store.LoseReplies(1) // the next renewal lands and is not answered
		time.Sleep(2 * L)
		served, _ := a.when(domain.StateServing)
		if due := landed[0].Sub(a.start) + L; served < due {
			t.Fatalf("a served again at %v, before its quarantine over the key it made at %v ended at %v (%s)",
				served, landed[0].Sub(a.start), due, a.path())
		}
	})
}

// A release whose write landed but whose answer was lost is a handover all
// the same: the engine drains beside its successor instead of fencing the
// calls it already took.
func TestAReleaseWhoseReplyWasLostIsStillAHandover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "v1", testTiming())
		a.mustServe(t)
		a.store.LoseReplies(1)
		if err := a.o.Release(context.Background()); err != nil {
			t.Fatalf("Release: %v", err)
		}
		wantHandedOver(t, a)
		if rec, _ := store.Read(context.Background()); !rec.Free() || rec.Holder.InstanceID != a.o.Me().InstanceID {
			t.Fatalf("the key holds %+v, want a's released record", rec)
		}
	})
}

// The same when the release's first write finds that a renewal whose
// answer was lost moved the revision, and the second write, at the new
// revision, lands without its answer.
func TestARetriedReleaseWhoseReplyWasLostIsStillAHandover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "v1", testTiming())
		a.mustServe(t)
		a.store.LoseReplies(1)
		time.Sleep(L/4 + time.Millisecond) // a renewal lands, its answer lost
		synctest.Wait()
		a.store.LoseReplies(1) // the conflict leaves it for the second write
		if err := a.o.Release(context.Background()); err != nil {
			t.Fatalf("Release: %v", err)
		}
		wantHandedOver(t, a)
	})
}

// A release whose first writes fail at once, with an error that is not a
// conflict (no responders while the lease stream elects a leader, a
// connection that is reconnecting), is tried again within its bound, and
// the standby takes over the moment it lands. Before, the release gave up
// at the first such error with most of its time left, wrote nothing, and
// the standby waited a whole lease for a holder that was gone.
func TestAReleaseWhoseFirstWritesAreRefusedIsTriedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "v1", testTiming())
		a.mustServe(t)
		b := newEngine(t, store, "b", "v2", testTiming())
		defer b.release(t)
		if out, err := b.claim(t, domain.RoleServe); err != nil || out != domain.OutcomeStandby {
			t.Fatalf("Claim = %v, %v; want standby", out, err)
		}
		done, stop := b.awaitInBackground()
		defer stop()
		time.Sleep(L + L/8) // between two of a's renewals
		a.store.RefuseWrites(3)
		start := time.Now()
		a.release(t)
		if took, bound := time.Since(start), testTiming().Renew(); took > bound {
			t.Fatalf("the release took %v, past its bound of a renewal period, %v", took, bound)
		}
		wantHandedOver(t, a)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("AwaitLease: %v", err)
			}
		case <-time.After(L / 2):
			t.Fatalf("b still waits half a lease after a's release (a: %s; b: %s)", a.path(), b.path())
		}
		if rec, _ := store.Read(context.Background()); rec.Holder.InstanceID != b.o.Me().InstanceID || rec.Holder.Released {
			t.Fatalf("the key holds %+v, want b's live record", rec)
		}
	})
}

// A release whose first write is refused and whose next one lands without
// its answer is a handover: the try after that conflicts, and the read
// finds the engine's own released record.
func TestARefusedReleaseWhoseRetryLandsUnansweredIsAHandover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "v1", testTiming())
		a.mustServe(t)
		time.Sleep(L/4 + L/8)
		a.store.RefuseWrites(1)
		a.store.LoseReplies(1)
		a.release(t)
		wantHandedOver(t, a)
		if rec, _ := store.Read(context.Background()); !rec.Free() || rec.Holder.InstanceID != a.o.Me().InstanceID {
			t.Fatalf("the key holds %+v, want a's released record", rec)
		}
	})
}

// A release tried again never writes over another engine's record: the
// key deleted and made anew by another engine between two tries is left
// as it is, and the release is not a handover.
func TestARetriedReleaseLeavesAnotherEnginesRecordAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "v1", testTiming())
		a.mustServe(t)
		time.Sleep(L/4 + L/8)
		a.store.RefuseWrites(1)
		released := make(chan error, 1)
		go func() { released <- a.o.Release(context.Background()) }()
		synctest.Wait() // the first write was refused; the release pauses before the next
		deleteKey(t, store)
		other := domain.Holder{InstanceID: domain.NewInstanceID(), Host: "other"}
		rev, err := store.Create(context.Background(), other)
		if err != nil {
			t.Fatal(err)
		}
		<-released
		rec, _ := store.Read(context.Background())
		if rec.Revision != rev || rec.Holder.InstanceID != other.InstanceID || rec.Holder.Released {
			t.Fatalf("the key holds %+v, want the other engine's record at %d untouched", rec, rev)
		}
		if a.o.HandedOver() {
			t.Fatalf("a says it handed over a key another engine holds (%s)", a.path())
		}
	})
}

// However often its writes fail, a release ends within a renewal period,
// the bound the engine's stop counts on, having written nothing.
func TestAReleaseWhoseWritesAllFailEndsWithinARenewalPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "v1", testTiming())
		a.mustServe(t)
		time.Sleep(L/4 + L/8)
		before, _ := store.Read(context.Background())
		a.store.RefuseWrites(1 << 20)
		start := time.Now()
		err := a.o.Release(context.Background())
		if err == nil {
			t.Fatalf("Release of a lease it could not write: no error")
		}
		if took, bound := time.Since(start), testTiming().Renew(); took > bound {
			t.Fatalf("the release took %v, past its bound of a renewal period, %v", took, bound)
		}
		if rec, _ := store.Read(context.Background()); rec != before {
			t.Fatalf("the key holds %+v, want a's record %+v untouched", rec, before)
		}
		if a.o.HandedOver() {
			t.Fatalf("a says it handed over a lease it never wrote (%s)", a.path())
		}
	})
}

// wantHandedOver fails unless e's last move was from serving to released,
// with the release written.
func wantHandedOver(t *testing.T, e *testEngine) {
	t.Helper()
	synctest.Wait()
	e.mu.Lock()
	last := e.events[len(e.events)-1].tr
	e.mu.Unlock()
	if last.From != domain.StateServing || last.To != domain.StateReleased || !last.HandedOver {
		t.Fatalf("last move %v -> %v, handed over %v; want serving -> released, handed over (%s)", last.From, last.To, last.HandedOver, e.path())
	}
	if !e.o.HandedOver() {
		t.Fatalf("the move says handed over, the ownership does not (%s)", e.path())
	}
}

// Engines of one account need not share lease_seconds: a deploy may change
// it, and a command run with the default configuration contends with an
// engine configured otherwise. A holder on a lease of 8 renews every 2 and
// serves until 4 without a renewal; a contender on a lease of 1 that
// judged silence by its own lease took the lease between two renewals,
// beside a holder that still served, which then lost it.
func TestAContenderWaitsForTheLeaseItsHolderRenewsBy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "", domain.Timing{Lease: 8 * L, StandbyTimeout: 10 * L})
		a.mustServe(t)
		defer a.release(t)
		time.Sleep(2*L + L/2) // just after a's renewal at 2
		for _, role := range []domain.Role{domain.RoleServe, domain.RoleAuto} {
			b := newEngine(t, store, "b-"+role.String(), "", testTiming())
			defer b.release(t)
			stop := watchOverlap(a, b)
			out, err := b.claim(t, role)
			if overlaps := stop(); overlaps > 0 {
				t.Fatalf("%s: a and b served at once %d times (%s; %s)", role, overlaps, a.path(), b.path())
			}
			var held *domain.HeldError
			switch {
			case role == domain.RoleServe && (!errors.As(err, &held) || held.Holder.InstanceID != a.o.Me().InstanceID):
				t.Fatalf("serve: Claim = %v, %v; want refused, naming a", out, err)
			case role == domain.RoleAuto && (err != nil || out != domain.OutcomeClient):
				t.Fatalf("auto: Claim = %v, %v; want client", out, err)
			}
		}
		wantState(t, a, domain.StateServing)
	})
}

// A key deleted under a holder on a longer lease than the contender's is
// held that longer lease before the contender serves: the holder serves on
// until its next renewal finds the contender's record, up to a quarter of
// its lease later, which the contender's own lease did not cover.
func TestAKeyDeletedUnderAHolderOfALongerLeaseIsHeldThatLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "v1", domain.Timing{Lease: 8 * L, StandbyTimeout: 10 * L})
		a.mustServe(t)
		defer a.release(t)
		b := newEngine(t, store, "b", "v2", domain.Timing{Lease: L, StandbyTimeout: 100 * L})
		defer b.release(t)
		if out, err := b.claim(t, domain.RoleServe); out != domain.OutcomeStandby {
			t.Fatalf("Claim = %v, %v; want standby", out, err)
		}
		stop := watchOverlap(a, b)
		done, cancel := b.awaitInBackground()
		defer cancel()
		time.Sleep(2*L + L/10) // just after a's renewal at 2
		deleteKey(t, store)
		if err := <-done; err != nil {
			t.Fatalf("AwaitLease: %v", err)
		}
		if overlaps := stop(); overlaps > 0 {
			t.Fatalf("a and b served at once %d times (%s; %s)", overlaps, a.path(), b.path())
		}
		served, _ := b.when(domain.StateServing)
		lost, ok := a.when(domain.StateLost)
		if !ok || lost > served {
			t.Fatalf("a lost the lease at %v (%v), not before b served at %v (%s)", lost, ok, served, a.path())
		}
	})
}

// An engine that never saw the record of a holder on a longer lease, and
// finds the key deleted under it, holds the key that longer lease before it
// serves: the holder wrote its lease beside the key before it took it, and
// a delete of the key leaves that. Before, the engine held the key its own
// shorter lease and served beside the holder, which serves on until its
// next renewal finds the engine's record, or, cut off, until half its own
// lease after its last renewal.
func TestAnEngineThatNeverSawAHolderOfALongerLeaseWaitsItOutOverADeletedKey(t *testing.T) {
	for _, cut := range []bool{false, true} {
		name := "Renewing"
		if cut {
			name = "CutOff"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := usedStore(t)
				a := newEngine(t, store, "a", "", domain.Timing{Lease: 8 * L, StandbyTimeout: 10 * L})
				a.mustServe(t)
				defer a.kill()
				time.Sleep(2*L + L/10) // just after a's renewal at 2
				synctest.Wait()
				if cut {
					a.store.Cut(true)
				}
				deleteKey(t, store)
				b := newEngine(t, store, "b", "", domain.Timing{Lease: L, StandbyTimeout: 10 * L})
				defer b.release(t)
				stop := watchOverlap(a, b)
				b.mustServe(t)
				time.Sleep(2 * L) // past a's next renewal, or its fence
				if overlaps := stop(); overlaps > 0 {
					t.Fatalf("a and b served at once %d times (%s; %s)", overlaps, a.path(), b.path())
				}
				served, _ := b.when(domain.StateServing)
				if served < 8*L { // b was made just after the delete
					t.Fatalf("b served %v after the delete, before a's lease of 8s had passed (%s)", served, b.path())
				}
			})
		})
	}
}

// stallAfterTakeover is a lease whose link stalls once a write of the
// engine's live record has been answered: every call after it hangs until
// the cut is lifted.
type stallAfterTakeover struct {
	*leasetest.Faulty
	once sync.Once
}

func (l *stallAfterTakeover) Update(ctx context.Context, h domain.Holder, rev uint64) (uint64, error) {
	next, err := l.Faulty.Update(ctx, h, rev)
	if err == nil && !h.Released {
		l.once.Do(func() { l.Cut(true) })
	}
	return next, err
}

// A takeover whose answer came more than half a lease after it was sent
// holds the lease but does not serve until a renewal succeeds. An engine
// stopped in that time, by a claim or a wait for the lease cut short, holds
// the lease all the same, and its release must be written. Before, Release
// took an engine that had not yet served for one that never held the
// lease: it wrote nothing, and the next engine waited a whole lease for a
// holder that was gone.
func TestATakeoverStoppedBeforeItServedIsReleased(t *testing.T) {
	for _, standby := range []bool{false, true} {
		name := "Claim"
		if standby {
			name = "AwaitLease"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := usedStore(t)
				var a *testEngine
				if standby {
					a = newEngine(t, store, "a", "v1", testTiming())
					a.mustServe(t)
				}
				b := newEngine(t, store, "b", "v2", testTiming())
				o, err := domain.NewOwnership(&stallAfterTakeover{Faulty: b.store}, b.o.Me(), testTiming(),
					domain.WithObserver(b.record), domain.WithLogger(slog.New(slog.DiscardHandler)))
				if err != nil {
					t.Fatal(err)
				}
				b.o = o
				if standby {
					if out, err := b.claim(t, domain.RoleServe); err != nil || out != domain.OutcomeStandby {
						t.Fatalf("Claim = %v, %v; want standby", out, err)
					}
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer func() { // lets every call end when the test fails
					cancel()
					b.store.Delay(0, 0)
					b.store.Cut(false)
					b.kill()
				}()
				done := make(chan error, 1)
				// The takeover's answer comes after its fence.
				stall := func() { b.store.Delay(0, L/2+time.Millisecond) }
				if standby {
					go func() { done <- b.o.AwaitLease(ctx) }()
					synctest.Wait() // b watches the lease
					stall()
					a.release(t)
				} else {
					stall()
					go func() {
						_, err := b.o.Claim(ctx, domain.RoleServe)
						done <- err
					}()
				}
				time.Sleep(2 * L) // the answer has come; every renewal since hangs
				rec, _ := store.Read(context.Background())
				if !rec.Present || rec.Holder.Released || rec.Holder.InstanceID != b.o.Me().InstanceID {
					t.Fatalf("b's takeover did not land: the key holds %+v (%s)", rec, b.path())
				}
				if _, served := b.when(domain.StateServing); served {
					t.Fatalf("b served with no renewal after a takeover answered past its fence: %s", b.path())
				}
				cancel()
				if err := <-done; !errors.Is(err, context.Canceled) {
					t.Fatalf("%s = %v, want it cut short by its context", name, err)
				}
				b.store.Delay(0, 0)
				b.store.Cut(false)
				b.release(t)
				rec, _ = store.Read(context.Background())
				if !rec.Present || !rec.Holder.Released || rec.Holder.InstanceID != b.o.Me().InstanceID {
					t.Fatalf("after b stopped the key holds %+v, want b's released record (%s)", rec, b.path())
				}
				synctest.Wait()
				b.mu.Lock()
				last := b.events[len(b.events)-1].tr
				b.mu.Unlock()
				if last.To != domain.StateReleased || !last.HandedOver || !b.o.HandedOver() {
					t.Fatalf("last move %v, handed over %v; want released, handed over (%s)", last, last.HandedOver, b.path())
				}
			})
		})
	}
}

// A hold still in its quarantine is not handed over when its engine stops:
// its record is left to go silent. The quarantine was as long as the
// longest lease the engine had seen a holder renew by, since whoever
// served before the key went may serve on until half of that has passed;
// a successor that never saw that holder takes the silent record over
// after the lease the record says it renews by. Before, the record said
// the engine's own lease, so a successor took over after that and served
// beside the earlier holder, cut off from the lease but not yet fenced.
func TestAHoldLeftInItsQuarantineMakesItsSuccessorWaitItOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "v1", domain.Timing{Lease: 8 * L, StandbyTimeout: 10 * L})
		a.mustServe(t)
		defer a.kill()
		short := domain.Timing{Lease: L, StandbyTimeout: 100 * L}
		b := newEngine(t, store, "b", "v2", short)
		if out, err := b.claim(t, domain.RoleServe); out != domain.OutcomeStandby {
			t.Fatalf("b: Claim = %v, %v; want standby", out, err)
		}
		done, cancel := b.awaitInBackground()
		defer cancel()
		time.Sleep(2*L + L/10) // just after a's renewal at 2, a's last: it serves until 6
		a.store.Cut(true)
		deleteKey(t, store)
		time.Sleep(L / 2)
		if rec, _ := store.Read(context.Background()); rec.Holder.InstanceID != b.o.Me().InstanceID {
			t.Fatalf("b did not make the deleted key anew: it holds %+v (%s)", rec, b.path())
		}
		wantState(t, b, domain.StateStandby) // in its quarantine
		cancel()
		<-done
		b.release(t)
		if rec, _ := store.Read(context.Background()); rec.Holder.Released {
			t.Fatalf("b handed over a hold in its quarantine: %+v", rec)
		}

		c := newEngine(t, store, "c", "v3", short)
		defer c.release(t)
		stop := watchOverlap(a, c)
		if out, err := c.claim(t, domain.RoleServe); err != nil || out != domain.OutcomeStandby {
			t.Fatalf("c: Claim = %v, %v; want standby", out, err)
		}
		if err := c.o.AwaitLease(context.Background()); err != nil {
			t.Fatalf("c: AwaitLease: %v", err)
		}
		time.Sleep(L)
		if overlaps := stop(); overlaps > 0 {
			t.Fatalf("a and c served at once %d times (a: %s; b: %s; c: %s)", overlaps, a.path(), b.path(), c.path())
		}
	})
}
