package domain_test

import (
	"context"
	"errors"
	"fmt"
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

// The state machine runs on synctest's fake clock over the in-memory lease,
// so every period below is exact and no test sleeps for real.

const L = time.Second

func testTiming() domain.Timing {
	return domain.Timing{Lease: L, StandbyTimeout: 10 * L}
}

// usedStore is the lease of an account an engine served before: it holds
// that engine's released record, so a claim may serve at once. A key with no
// value makes the first holder wait a lease (see
// TestAKeyWithNoHistoryIsHeldALeaseBeforeServing).
func usedStore(t *testing.T) *memory.Lease {
	t.Helper()
	store := memory.New()
	if _, err := store.Create(context.Background(), domain.Holder{InstanceID: domain.NewInstanceID(), Host: "before", Released: true}); err != nil {
		t.Fatal(err)
	}
	return store
}

type event struct {
	at time.Duration
	tr domain.Transition
}

// testEngine is one engine's ownership, its faulty view of the store, and
// every transition it made with the fake time it made it at.
type testEngine struct {
	name  string
	o     *domain.Ownership
	store *leasetest.Faulty
	start time.Time

	mu     sync.Mutex
	events []event
}

func newEngine(t *testing.T, store domain.Lease, name, rollout string, timing domain.Timing, opts ...domain.Option) *testEngine {
	t.Helper()
	e := &testEngine{name: name, store: leasetest.Wrap(store), start: time.Now()}
	me := domain.Holder{
		InstanceID: domain.NewInstanceID(),
		Host:       "host-" + name,
		PID:        100,
		Version:    "1.4.0",
		RolloutID:  rollout,
		StartedAt:  time.Date(2026, 12, 2, 10, 2, 11, 0, time.UTC),
	}
	o, err := domain.NewOwnership(e.store, me, timing, append([]domain.Option{
		domain.WithObserver(e.record),
		domain.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	if err != nil {
		t.Fatalf("NewOwnership: %v", err)
	}
	e.o = o
	return e
}

func (e *testEngine) record(tr domain.Transition) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, event{at: time.Since(e.start), tr: tr})
}

// when returns when the engine last moved to state, and whether it did.
// It first lets the bubble settle: Claim and AwaitLease return as soon as
// the engine serves, and the observer hears of it just after.
func (e *testEngine) when(state domain.State) (time.Duration, bool) {
	synctest.Wait()
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := len(e.events) - 1; i >= 0; i-- {
		if e.events[i].tr.To == state {
			return e.events[i].at, true
		}
	}
	return 0, false
}

func (e *testEngine) path() string {
	synctest.Wait()
	e.mu.Lock()
	defer e.mu.Unlock()
	var b strings.Builder
	b.WriteString(domain.StateIdle.String())
	for _, ev := range e.events {
		fmt.Fprintf(&b, " -%v-> %s", ev.at, ev.tr.To)
	}
	return b.String()
}

func (e *testEngine) claim(t *testing.T, role domain.Role) (domain.Outcome, error) {
	t.Helper()
	return e.o.Claim(context.Background(), role)
}

func (e *testEngine) mustServe(t *testing.T) {
	t.Helper()
	out, err := e.claim(t, domain.RoleServe)
	if err != nil || out != domain.OutcomeServe {
		t.Fatalf("%s: Claim = %v, %v; want serve", e.name, out, err)
	}
}

// kill ends an engine whose store is cut off: it cannot release.
func (e *testEngine) kill() { _ = e.o.Release(context.Background()) }

func (e *testEngine) release(t *testing.T) {
	t.Helper()
	if err := e.o.Release(context.Background()); err != nil {
		t.Errorf("%s: Release: %v", e.name, err)
	}
}

// awaitInBackground runs AwaitLease; stop cancels it and waits.
func (e *testEngine) awaitInBackground() (result <-chan error, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan error, 1)
	go func() { out <- e.o.AwaitLease(ctx) }()
	return out, func() { cancel() }
}

func wantState(t *testing.T, e *testEngine, want domain.State) {
	t.Helper()
	synctest.Wait()
	if got := e.o.State(); got != want {
		t.Fatalf("%s is %s, want %s (%s)", e.name, got, want, e.path())
	}
}

func TestClaimDecidesHowAnEngineStarts(t *testing.T) {
	type setup func(t *testing.T, store *memory.Lease) (stop func())
	holderRenewing := func(rollout string) setup {
		return func(t *testing.T, store *memory.Lease) func() {
			a := newEngine(t, store, "a", rollout, testTiming())
			a.mustServe(t)
			return func() { a.release(t) }
		}
	}
	write := func(t *testing.T, store *memory.Lease, h domain.Holder) uint64 {
		rec, _ := store.Read(context.Background())
		rev, err := store.Update(context.Background(), h, rec.Revision)
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	holderSilent := func(t *testing.T, store *memory.Lease) func() {
		write(t, store, domain.Holder{InstanceID: domain.NewInstanceID(), Host: "dead"})
		return func() {}
	}
	released := func(t *testing.T, store *memory.Lease) func() {
		a := newEngine(t, store, "a", "", testTiming())
		a.mustServe(t)
		a.release(t)
		return func() {}
	}
	deleted := func(t *testing.T, store *memory.Lease) func() {
		rev := write(t, store, domain.Holder{InstanceID: domain.NewInstanceID(), Host: "gone"})
		if err := store.Delete(context.Background(), rev); err != nil {
			t.Fatal(err)
		}
		return func() {}
	}
	unknown := func(t *testing.T, store *memory.Lease) func() {
		write(t, store, domain.Holder{})
		return func() {}
	}
	free := func(*testing.T, *memory.Lease) func() { return func() {} }
	empty := func(_ *testing.T, store *memory.Lease) func() {
		store.Recreate()
		return func() {}
	}
	purged := func(t *testing.T, store *memory.Lease) func() {
		a := newEngine(t, store, "a", "", testTiming())
		a.mustServe(t)
		store.Purge()
		return func() { a.kill() }
	}

	cases := []struct {
		name    string
		setup   setup
		role    domain.Role
		rollout string
		want    domain.Outcome
		wantErr error
		// after is how long the claim takes on the fake clock.
		after time.Duration
	}{
		{"FreeLeaseServesAtOnce", free, domain.RoleServe, "", domain.OutcomeServe, nil, 0},
		{"NewAccountServesAfterALease", empty, domain.RoleServe, "", domain.OutcomeServe, nil, L},
		{"PurgedKeyServesAfterALease", purged, domain.RoleServe, "", domain.OutcomeServe, nil, L},
		{"ClientNeverClaims", holderRenewing(""), domain.RoleClient, "", domain.OutcomeClient, nil, 0},
		{"LiveHolderWithoutRolloutFails", holderRenewing(""), domain.RoleServe, "", 0, domain.ErrAlreadyServing, L / 4},
		{"LiveHolderOfTheSameRolloutFails", holderRenewing("r7"), domain.RoleServe, "r7", 0, domain.ErrAlreadyServing, L / 4},
		{"LiveHolderOfAnotherRolloutMakesAStandby", holderRenewing("r6"), domain.RoleServe, "r7", domain.OutcomeStandby, nil, 0},
		{"NoRolloutNextToARolloutHolderFails", holderRenewing("r6"), domain.RoleServe, "", 0, domain.ErrAlreadyServing, L / 4},
		{"AutoNextToALiveHolderIsAClient", holderRenewing(""), domain.RoleAuto, "", domain.OutcomeClient, nil, L / 4},
		{"AutoNeverStandsBy", holderRenewing("r6"), domain.RoleAuto, "r7", domain.OutcomeClient, nil, L / 4},
		{"AutoServesAFreeLease", free, domain.RoleAuto, "r7", domain.OutcomeServe, nil, 0},
		{"SilentHolderIsTakenOverAfterOneLease", holderSilent, domain.RoleServe, "", domain.OutcomeServe, nil, L},
		{"UnreadableSilentHolderIsTakenOverAfterOneLease", unknown, domain.RoleServe, "", domain.OutcomeServe, nil, L},
		{"ReleasedLeaseServesAtOnce", released, domain.RoleServe, "", domain.OutcomeServe, nil, 0},
		{"DeletedKeyServesAfterALease", deleted, domain.RoleServe, "", domain.OutcomeServe, nil, L},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := usedStore(t)
				stop := c.setup(t, store)
				defer stop()
				before, err := store.Read(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				b := newEngine(t, store, "b", c.rollout, testTiming())
				defer b.release(t)
				start := time.Now()
				got, err := b.claim(t, c.role)
				took := time.Since(start)
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("Claim error %v, want %v", err, c.wantErr)
				}
				if err == nil && got != c.want {
					t.Fatalf("Claim = %v, want %v", got, c.want)
				}
				if took != c.after {
					t.Fatalf("Claim took %v on the fake clock, want %v", took, c.after)
				}
				after, err := store.Read(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case c.wantErr != nil || got != domain.OutcomeServe:
					if after.Present && after.Holder.InstanceID == b.o.Me().InstanceID {
						t.Fatalf("an engine that does not serve wrote the lease: %+v", after)
					}
				case after.Holder.InstanceID != b.o.Me().InstanceID || !b.o.MayServe():
					t.Fatalf("serving engine: lease %+v, MayServe %v", after, b.o.MayServe())
				}
				if c.role == domain.RoleClient && after.Revision != before.Revision {
					t.Fatalf("a client moved the lease from revision %d to %d", before.Revision, after.Revision)
				}
			})
		})
	}
}

func TestTheRefusalNamesTheHolder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "web-1", "r7", testTiming())
		a.mustServe(t)
		defer a.release(t)
		b := newEngine(t, store, "b", "r7", testTiming())
		_, err := b.claim(t, domain.RoleServe)
		var held *domain.HeldError
		if !errors.As(err, &held) || held.Holder.InstanceID != a.o.Me().InstanceID {
			t.Fatalf("Claim error %v, want a HeldError naming engine %s", err, a.o.Me().InstanceID)
		}
		for _, want := range []string{a.o.Me().InstanceID, "host host-web-1", "pid 100", "version 1.4.0", "rollout r7", "since 2026-12-02T10:02:11Z"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
		}
	})
}

func TestAHolderRenewsEveryQuarterLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "", testTiming())
		a.mustServe(t)
		defer a.release(t)
		first := a.o.Record().Revision
		for i := 1; i <= 8; i++ {
			time.Sleep(L / 4)
			synctest.Wait()
			rec, _ := store.Read(context.Background())
			if want := first + uint64(i); rec.Revision != want {
				t.Fatalf("after %d quarter leases the revision is %d, want %d", i, rec.Revision, want)
			}
		}
		wantState(t, a, domain.StateServing)
	})
}

func TestAHolderThatCannotRenewFencesAtHalfLeaseAndRestores(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "", testTiming())
		a.mustServe(t)
		defer a.release(t)
		time.Sleep(3 * L / 10) // the renewal at L/4 went through
		a.store.Cut(true)
		time.Sleep(L / 2)
		wantState(t, a, domain.StateFenced)
		// The fence runs from the start of the last good renewal, L/4, even
		// though the renewals since then hang.
		if at, _ := a.when(domain.StateFenced); at != L/4+L/2 {
			t.Fatalf("fenced at %v, want %v (%s)", at, L/4+L/2, a.path())
		}
		if a.o.MayServe() {
			t.Fatalf("a fenced engine may serve")
		}
		a.store.Cut(false)
		time.Sleep(L / 2)
		wantState(t, a, domain.StateServing)
		if !a.o.MayServe() {
			t.Fatalf("a restored engine may not serve")
		}
	})
}

func TestTheFenceRunsFromTheStartOfTheLastGoodRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "", testTiming())
		a.mustServe(t)
		// Every reply now takes almost a quarter lease: the renewal started at
		// L/4 succeeds, but its reply lands just before L/2.
		a.store.Delay(0, L/4-time.Millisecond)
		time.Sleep(L/4 + time.Millisecond)
		a.store.Cut(true)
		defer a.kill()
		time.Sleep(L)
		at, ok := a.when(domain.StateFenced)
		if !ok || at != L/4+L/2 {
			t.Fatalf("fenced at %v (%v), want %v: from the renewal's start, not its reply (%s)", at, ok, L/4+L/2, a.path())
		}
	})
}

func TestALostRenewalReplyIsRecognisedWithoutFencing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "", testTiming())
		a.mustServe(t)
		defer a.release(t)
		a.store.LoseReplies(1)
		time.Sleep(2 * L)
		wantState(t, a, domain.StateServing)
		if _, fenced := a.when(domain.StateFenced); fenced {
			t.Fatalf("a lost reply fenced the engine: %s", a.path())
		}
		rec, _ := store.Read(context.Background())
		if rec.Holder.InstanceID != a.o.Me().InstanceID {
			t.Fatalf("lease held by %s, want %s", rec.Holder, a.o.Me())
		}
	})
}

func TestAFencedHolderThatFindsAnotherHolderIsLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "", testTiming())
		a.mustServe(t)
		a.store.Cut(true)
		b := newEngine(t, store, "b", "", testTiming())
		b.mustServe(t)
		defer b.release(t)
		// b waited a full lease of silence; a fenced long before.
		fenced, _ := a.when(domain.StateFenced)
		served, _ := b.when(domain.StateServing)
		if fenced >= served {
			t.Fatalf("a fenced at %v, after b served at %v", fenced, served)
		}
		a.store.Cut(false)
		select {
		case <-a.o.Lost():
		case <-time.After(L):
			t.Fatalf("a never learnt it lost the lease: %s", a.path())
		}
		wantState(t, a, domain.StateLost)
		if err := a.o.Release(context.Background()); err != nil {
			t.Fatalf("Release after losing: %v", err)
		}
		rec, _ := store.Read(context.Background())
		if rec.Holder.InstanceID != b.o.Me().InstanceID || rec.Holder.Released {
			t.Fatalf("the lost engine's release touched b's lease: %+v", rec)
		}
	})
}

func TestAKeyDeletedUnderTheHolderIsCreatedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "", testTiming())
		a.mustServe(t)
		defer a.release(t)
		if err := store.Delete(context.Background(), a.o.Record().Revision); err != nil {
			t.Fatal(err)
		}
		time.Sleep(L / 4)
		synctest.Wait()
		rec, _ := store.Read(context.Background())
		if !rec.Present || rec.Holder.InstanceID != a.o.Me().InstanceID {
			t.Fatalf("after a third party's delete the lease reads %+v, want a's record again", rec)
		}
		// Another engine may have taken the lease before the delete, so a
		// stays out for a lease, as a new holder of a deleted key does.
		wantState(t, a, domain.StateFenced)
		time.Sleep(L)
		wantState(t, a, domain.StateServing)
		if at, _ := a.when(domain.StateServing); at != L/4+L {
			t.Fatalf("a served again at %v, want %v (%s)", at, L/4+L, a.path())
		}
	})
}

func TestAStandbyTakesOverTheMomentTheHolderReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "v1", testTiming())
		a.mustServe(t)
		b := newEngine(t, store, "b", "v2", testTiming())
		defer b.release(t)
		if out, err := b.claim(t, domain.RoleServe); err != nil || out != domain.OutcomeStandby {
			t.Fatalf("Claim = %v, %v; want standby", out, err)
		}
		wantState(t, b, domain.StateStandby)
		done, stop := b.awaitInBackground()
		defer stop()
		time.Sleep(3 * L)
		wantState(t, b, domain.StateStandby)
		releasedAt := time.Since(b.start)
		a.release(t)
		if err := <-done; err != nil {
			t.Fatalf("AwaitLease: %v", err)
		}
		if at, _ := b.when(domain.StateServing); at != releasedAt {
			t.Fatalf("b served at %v, want at the release, %v", at, releasedAt)
		}
		rec, _ := store.Read(context.Background())
		if rec.Holder.InstanceID != b.o.Me().InstanceID {
			t.Fatalf("lease held by %s, want b", rec.Holder)
		}
		wantState(t, a, domain.StateReleased)
	})
}

func TestAStandbyTakesOverADeadHolderAfterOneLease(t *testing.T) {
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
		time.Sleep(L / 10)
		a.store.Cut(true) // a's last renewal was at 0; it dies now
		if err := <-done; err != nil {
			t.Fatalf("AwaitLease: %v", err)
		}
		served, _ := b.when(domain.StateServing)
		if served != L {
			t.Fatalf("b served at %v, want one lease after a's last renewal was seen, %v", served, L)
		}
		if fenced, ok := a.when(domain.StateFenced); !ok || fenced > served {
			t.Fatalf("a fenced at %v (%v), not before b served at %v", fenced, ok, served)
		}
	})
}

func TestAStandbyTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "v1", testTiming())
		a.mustServe(t)
		defer a.release(t)
		timing := testTiming()
		timing.StandbyTimeout = 3 * L
		b := newEngine(t, store, "b", "v2", timing)
		defer b.release(t)
		if out, _ := b.claim(t, domain.RoleServe); out != domain.OutcomeStandby {
			t.Fatalf("Claim = %v, want standby", out)
		}
		start := time.Now()
		err := b.o.AwaitLease(context.Background())
		if !errors.Is(err, domain.ErrStandbyTimedOut) || !strings.Contains(err.Error(), a.o.Me().InstanceID) {
			t.Fatalf("AwaitLease error %v, want ErrStandbyTimedOut naming the holder", err)
		}
		if took := time.Since(start); took != 3*L {
			t.Fatalf("timed out after %v, want %v", took, 3*L)
		}
		wantState(t, b, domain.StateIdle)
	})
}

func TestAStandbyStopsWhenItsOwnReleaseTakesTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "v1", testTiming())
		a.mustServe(t)
		b := newEngine(t, store, "b", "v2", testTiming())
		c := newEngine(t, store, "c", "v2", testTiming())
		defer b.release(t)
		defer c.release(t)
		for _, e := range []*testEngine{b, c} {
			if out, _ := e.claim(t, domain.RoleServe); out != domain.OutcomeStandby {
				t.Fatalf("%s: Claim = %v, want standby", e.name, out)
			}
		}
		bDone, stopB := b.awaitInBackground()
		defer stopB()
		cDone, stopC := c.awaitInBackground()
		defer stopC()
		time.Sleep(L)
		a.release(t)
		errs := []error{<-bDone, <-cDone}
		won, refused := 0, 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case errors.Is(err, domain.ErrAlreadyServing):
				refused++
			default:
				t.Fatalf("AwaitLease: %v", err)
			}
		}
		if won != 1 || refused != 1 {
			t.Fatalf("%d standbys took the lease and %d were refused, want 1 and 1", won, refused)
		}
	})
}

func TestAContenderWaitsALeaseAfterAThirdPartyDelete(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "v1", testTiming())
		a.mustServe(t)
		defer a.release(t)
		b := newEngine(t, store, "b", "v2", testTiming())
		defer b.release(t)
		if out, _ := b.claim(t, domain.RoleServe); out != domain.OutcomeStandby {
			t.Fatalf("Claim = %v, want standby", out)
		}
		done, stop := b.awaitInBackground()
		defer stop()
		time.Sleep(L / 10)
		deletedAt := time.Since(b.start)
		if err := store.Delete(context.Background(), a.o.Record().Revision); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("AwaitLease: %v", err)
		}
		served, _ := b.when(domain.StateServing)
		if served != deletedAt+L {
			t.Fatalf("b served at %v, want a lease after the delete at %v", served, deletedAt)
		}
		lost, ok := a.when(domain.StateLost)
		if !ok || lost > served {
			t.Fatalf("a lost the lease at %v (%v), not before b served at %v (%s)", lost, ok, served, a.path())
		}
	})
}

func TestReleaseWritesAReleasedRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "", testTiming())
		a.mustServe(t)
		a.release(t)
		wantState(t, a, domain.StateReleased)
		rec, _ := store.Read(context.Background())
		if !rec.Present || !rec.Holder.Released || rec.Holder.InstanceID != a.o.Me().InstanceID {
			t.Fatalf("after Release the lease reads %+v, want a's released record", rec)
		}
		if a.o.MayServe() {
			t.Fatalf("a released engine may serve")
		}
		before := rec.Revision
		time.Sleep(2 * L)
		if rec, _ := store.Read(context.Background()); rec.Revision != before {
			t.Fatalf("a released engine still writes the lease: revision %d, want %d", rec.Revision, before)
		}
	})
}

func TestReleaseAfterALostReplyStillReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "", testTiming())
		a.mustServe(t)
		a.store.LoseReplies(1)
		time.Sleep(L/4 + time.Millisecond) // the renewal went through; its reply did not
		a.release(t)
		rec, _ := store.Read(context.Background())
		if !rec.Holder.Released {
			t.Fatalf("after a lost renewal reply, Release left %+v", rec)
		}
	})
}

func TestAStandbyReleasesWithoutTouchingTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "v1", testTiming())
		a.mustServe(t)
		defer a.release(t)
		b := newEngine(t, store, "b", "v2", testTiming())
		if out, _ := b.claim(t, domain.RoleServe); out != domain.OutcomeStandby {
			t.Fatalf("Claim = %v, want standby", out)
		}
		before, _ := store.Read(context.Background())
		b.release(t)
		after, _ := store.Read(context.Background())
		if after != before {
			t.Fatalf("a standby's release changed the lease from %+v to %+v", before, after)
		}
	})
}

func TestTimingIsValidatedByKey(t *testing.T) {
	cases := []struct {
		timing domain.Timing
		key    string
	}{
		{domain.Timing{Lease: 500 * time.Millisecond, StandbyTimeout: time.Minute}, "lease_seconds"},
		{domain.Timing{Lease: 301 * time.Second, StandbyTimeout: time.Minute}, "lease_seconds"},
		{domain.Timing{Lease: time.Second}, "standby_timeout_seconds"},
		{domain.Timing{Lease: time.Second, StandbyTimeout: time.Minute, Drain: -time.Second}, "drain_seconds"},
	}
	for _, c := range cases {
		err := c.timing.Validate()
		if !errors.Is(err, domain.ErrInvalidConfig) || !strings.Contains(err.Error(), c.key) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", c.timing, err, c.key)
		}
		if _, err := domain.NewOwnership(memory.New(), domain.ThisProcess("t", ""), c.timing); !errors.Is(err, domain.ErrInvalidConfig) {
			t.Errorf("NewOwnership accepted %+v", c.timing)
		}
	}
	if err := domain.DefaultTiming().Validate(); err != nil {
		t.Fatalf("default timing: %v", err)
	}
	if d := domain.DefaultTiming(); d.Lease != 20*time.Second || d.StandbyTimeout != 900*time.Second || d.Drain != 60*time.Second {
		t.Fatalf("defaults %+v, want lease 20 s, standby 900 s, drain 60 s", d)
	}
}

func TestNewOwnershipChecksTheHolder(t *testing.T) {
	bad := domain.ThisProcess("t", "")
	bad.InstanceID = "ABC"
	if _, err := domain.NewOwnership(memory.New(), bad, testTiming()); !errors.Is(err, domain.ErrInvalidConfig) {
		t.Fatalf("instance id %q accepted: %v", bad.InstanceID, err)
	}
	bad = domain.ThisProcess("t", "-no")
	if _, err := domain.NewOwnership(memory.New(), bad, testTiming()); !errors.Is(err, domain.ErrInvalidConfig) {
		t.Fatalf("rollout id %q accepted: %v", bad.RolloutID, err)
	}
}

func TestRolloutIDs(t *testing.T) {
	for _, ok := range []string{"", "r7", "v1.4.0", "sha256:abc", "_x", strings.Repeat("a", 128)} {
		if err := domain.ValidateRolloutID(ok); err != nil {
			t.Errorf("ValidateRolloutID(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"-x", ".x", "a b", "a/b", strings.Repeat("a", 129), "é"} {
		if err := domain.ValidateRolloutID(bad); !errors.Is(err, domain.ErrInvalidConfig) {
			t.Errorf("ValidateRolloutID(%q) accepted", bad)
		}
	}
}

func TestRoles(t *testing.T) {
	for s, want := range map[string]domain.Role{"": domain.RoleServe, "serve": domain.RoleServe, "client": domain.RoleClient, "auto": domain.RoleAuto} {
		got, err := domain.ParseRole(s)
		if err != nil || got != want {
			t.Errorf("ParseRole(%q) = %v, %v", s, got, err)
		}
		if s != "" && got.String() != s {
			t.Errorf("%v.String() = %q", got, got.String())
		}
	}
	if _, err := domain.ParseRole("primary"); !errors.Is(err, domain.ErrInvalidConfig) || !strings.Contains(err.Error(), "primary") {
		t.Fatalf("ParseRole(primary) = %v", err)
	}
}

func TestAHotStandbyOfTheSameReleaseWaitsAndTakesOverAfterACrash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "v1", testTiming())
		a.mustServe(t)
		defer a.kill()
		timing := testTiming()
		timing.StandbyTimeout = 2 * L
		b := newEngine(t, store, "b", "v1", timing)
		hot, err := domain.NewOwnership(b.store, b.o.Me(), timing, domain.WithHotStandby(),
			domain.WithObserver(b.record), domain.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		b.o = hot
		defer b.release(t)
		if out, err := b.claim(t, domain.RoleServe); err != nil || out != domain.OutcomeStandby {
			t.Fatalf("Claim = %v, %v; want a hot standby", out, err)
		}
		done, stop := b.awaitInBackground()
		defer stop()
		time.Sleep(5 * L) // past the standby timeout: a hot standby waits on
		wantState(t, b, domain.StateStandby)
		crashed := time.Since(b.start)
		a.store.Cut(true)
		if err := <-done; err != nil {
			t.Fatalf("AwaitLease: %v", err)
		}
		served, _ := b.when(domain.StateServing)
		if served-crashed > L || served-crashed < 3*L/4 {
			t.Fatalf("took over %v after the crash, want one lease after the last renewal", served-crashed)
		}
	})
}

func TestAHotStandbyTakesOverAtRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "", testTiming())
		a.mustServe(t)
		b := newEngine(t, store, "b", "", testTiming())
		hot, err := domain.NewOwnership(b.store, b.o.Me(), testTiming(), domain.WithHotStandby(),
			domain.WithObserver(b.record), domain.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		b.o = hot
		defer b.release(t)
		if out, _ := b.claim(t, domain.RoleServe); out != domain.OutcomeStandby {
			t.Fatalf("Claim = %v, want a hot standby", out)
		}
		done, stop := b.awaitInBackground()
		defer stop()
		time.Sleep(L)
		released := time.Since(b.start)
		a.release(t)
		if err := <-done; err != nil {
			t.Fatalf("AwaitLease: %v", err)
		}
		if served, _ := b.when(domain.StateServing); served != released {
			t.Fatalf("served at %v, want at the release, %v", served, released)
		}
	})
}

func TestTransitionsSayFromWhomAndWhy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		var mu sync.Mutex
		var seen []domain.Transition
		me := domain.ThisProcess("t", "")
		a := newEngine(t, store, "a", "", testTiming())
		a.mustServe(t)
		a.store.Cut(true)
		defer a.kill()
		b, err := domain.NewOwnership(store, me, testTiming(), domain.WithLogger(slog.New(slog.DiscardHandler)),
			domain.WithObserver(func(tr domain.Transition) { mu.Lock(); seen = append(seen, tr); mu.Unlock() }))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Claim(context.Background(), domain.RoleServe); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = b.Release(context.Background()) }()
		synctest.Wait() // the keeper reports the move to serving after Claim returns
		mu.Lock()
		defer mu.Unlock()
		if len(seen) == 0 || seen[0].To != domain.StateServing || seen[0].Previous.InstanceID != a.o.Me().InstanceID {
			t.Fatalf("transitions %+v, want serving taken from %s", seen, a.o.Me().InstanceID)
		}
	})
}

// cancelAfterWrite is a lease whose Update cancels the caller's claim once
// the write has landed: a signal that reaches the engine just then. With
// loseReply the claim hears only that its context ended, as a write cut
// off while its reply was on its way.
type cancelAfterWrite struct {
	domain.Lease
	cancel    context.CancelFunc
	loseReply bool
}

func (l cancelAfterWrite) Update(ctx context.Context, h domain.Holder, rev uint64) (uint64, error) {
	next, err := l.Lease.Update(ctx, h, rev)
	l.cancel()
	if l.loseReply && ctx.Err() != nil {
		// The claim's write: its context is the one just ended. A
		// renewal's write, on a context of the keeper's, is answered.
		return 0, ctx.Err()
	}
	return next, err
}

// A claim cut short after its write landed, whether or not its reply came,
// leaves a record of the engine's in the lease; Release must write it
// released, or the next engine waits a whole lease for a holder that is
// gone. Before, a claim whose reply was lost read its write back on the
// context that had ended, so the read failed, the claim did not know it
// held the lease, and Release wrote nothing.
func TestAClaimCutShortAfterItsWriteIsReleased(t *testing.T) {
	for _, loseReply := range []bool{false, true} {
		t.Run(fmt.Sprintf("ReplyLost=%v", loseReply), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := usedStore(t)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				me := domain.ThisProcess("1.4.0", "")
				o, err := domain.NewOwnership(cancelAfterWrite{Lease: store, cancel: cancel, loseReply: loseReply}, me, testTiming(),
					domain.WithLogger(slog.New(slog.DiscardHandler)))
				if err != nil {
					t.Fatal(err)
				}
				// The engine serves as soon as its keeper runs, at the
				// instant the context ends: the claim may answer either.
				if out, err := o.Claim(ctx, domain.RoleServe); err != nil && !errors.Is(err, context.Canceled) || err == nil && out != domain.OutcomeServe {
					t.Fatalf("Claim = %v, %v; want it cut short by its context, or serving", out, err)
				}
				if err := o.Release(context.Background()); err != nil {
					t.Fatalf("Release: %v", err)
				}
				rec, _ := store.Read(context.Background())
				if !rec.Present || !rec.Holder.Released || rec.Holder.InstanceID != me.InstanceID {
					t.Fatalf("after a claim cut short and Release the lease reads %+v, want the engine's released record", rec)
				}
			})
		})
	}
}

// A fence says why: renewals that fail and a lease key someone deleted
// call for different remedies. Before, both moves carried no reason, and
// a fence over a key made anew read as a holder that could not renew.
func TestAFenceSaysWhyItFenced(t *testing.T) {
	cases := []struct {
		name      string
		cause     func(t *testing.T, store *memory.Lease, a *testEngine)
		want, not string
	}{
		{"NoRenewal", func(t *testing.T, _ *memory.Lease, a *testEngine) { a.store.Cut(true) },
			"no renewal succeeded for half a lease", "deleted"},
		{"KeyMadeAnew", func(t *testing.T, store *memory.Lease, a *testEngine) {
			if err := store.Delete(context.Background(), a.o.Record().Revision); err != nil {
				t.Fatal(err)
			}
		}, "deleted by someone else and made anew", "no renewal"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := usedStore(t)
				a := newEngine(t, store, "a", "", testTiming())
				a.mustServe(t)
				defer a.kill()
				c.cause(t, store, a)
				time.Sleep(L)
				wantState(t, a, domain.StateFenced)
				a.store.Cut(false)
				a.mu.Lock()
				var reason string
				for _, ev := range a.events {
					if ev.tr.To == domain.StateFenced {
						reason = ev.tr.Reason
					}
				}
				a.mu.Unlock()
				if !strings.Contains(reason, c.want) || strings.Contains(reason, c.not) {
					t.Fatalf("the fence says %q, want it to say %q (%s)", reason, c.want, a.path())
				}
			})
		})
	}
}

// commandEngine serves on store as the engine of one CLI command does: of
// role auto, its record marked Command.
func commandEngine(t *testing.T, store domain.Lease) *domain.Ownership {
	t.Helper()
	me := domain.Holder{InstanceID: domain.NewInstanceID(), Host: "host-cli", PID: 200, Version: "1.4.0", StartedAt: time.Now(), Command: true}
	o, err := domain.NewOwnership(store, me, testTiming(), domain.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := o.Claim(context.Background(), domain.RoleAuto); err != nil || out != domain.OutcomeServe {
		t.Fatalf("the command's claim = %v, %v; want serve", out, err)
	}
	return o
}

// An engine of role serve that finds the lease held, and renewed, by the
// engine of a CLI command waits for that engine to release it as its
// command returns, and serves then; one that does not release within the
// start fails naming it. Before, serve failed naming the command's engine
// at its first renewal, a quarter of a lease in, as if another engine
// served for good, though the command's was about to stop.
func TestServeWaitsForTheEngineOfACommandToRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		cmd := commandEngine(t, store)
		defer func() { _ = cmd.Release(context.Background()) }()
		b := newEngine(t, store, "b", "", testTiming())
		defer b.release(t)
		type claimed struct {
			out domain.Outcome
			err error
		}
		done := make(chan claimed, 1)
		go func() {
			out, err := b.claim(t, domain.RoleServe)
			done <- claimed{out, err}
		}()
		time.Sleep(3 * L)
		synctest.Wait()
		select {
		case c := <-done:
			t.Fatalf("serve's claim beside a command's engine renewing the lease = %v, %v; want it to wait", c.out, c.err)
		default:
		}
		if err := cmd.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		c := <-done
		if c.err != nil || c.out != domain.OutcomeServe {
			t.Fatalf("serve's claim once the command's engine released = %v, %v; want serve", c.out, c.err)
		}
		if rec, _ := store.Read(context.Background()); rec.Holder.InstanceID != b.o.Me().InstanceID {
			t.Fatalf("the lease is %+v, want b's", rec.Holder)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		cmd := commandEngine(t, store)
		defer func() { _ = cmd.Release(context.Background()) }()
		b := newEngine(t, store, "b", "", testTiming())
		ctx, cancel := context.WithTimeout(context.Background(), 5*L)
		defer cancel()
		_, err := b.o.Claim(ctx, domain.RoleServe)
		var held *domain.HeldError
		if !errors.As(err, &held) || held.Holder.InstanceID != cmd.Me().InstanceID || !strings.Contains(err.Error(), "the engine of a command did not release the lease") {
			t.Fatalf("serve's claim beside a command's engine that never releases: %v; want a HeldError naming it as a command's", err)
		}
	})
}
