package domain_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/abi-engine/engine/domain"
)

// Only a holder whose keeper has stopped turning is stalled, StalledAfter
// leases after its last renewal's answer: the liveness probe restarts it,
// and must never restart a holder fenced for want of its store, one waiting
// out a key made anew, a standby, or an engine that released the lease.
func TestOnlyAHolderWhoseKeeperStopsTurningIsStalled(t *testing.T) {
	t.Run("KeeperStuckOnItsObserver", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// An observer that blocks holds the keeper, which tells it of
			// every move: it neither renews nor fences again.
			block := make(chan struct{})
			var armed atomic.Bool
			a := newEngine(t, usedStore(t), "a", "", testTiming(), domain.WithObserver(func(domain.Transition) {
				if armed.Load() {
					<-block
				}
			}))
			a.mustServe(t)
			armed.Store(true)
			a.store.Cut(true) // the fence is the move the observer holds
			time.Sleep(2 * L)
			if a.o.Stalled() {
				t.Fatal("stalled two leases after the cut; its last answer came within half a lease of it")
			}
			time.Sleep(2 * L)
			if !a.o.Stalled() {
				t.Fatalf("a keeper held by its observer is not stalled four leases after the cut (%s)", a.o.State())
			}
			close(block)
			a.store.Cut(false)
			a.kill()
		})
	})
	t.Run("FencedForWantOfItsStore", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := newEngine(t, usedStore(t), "a", "", testTiming())
			a.mustServe(t)
			a.store.Cut(true)
			time.Sleep(10 * L)
			wantState(t, a, domain.StateFenced)
			if a.o.Stalled() {
				t.Fatal("a holder whose renewals fail is stalled")
			}
			a.store.Cut(false)
			a.kill()
		})
	})
	t.Run("WaitingOutAKeyMadeAnew", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			store := usedStore(t)
			// A hold of a key made anew lasts the longest lease the store
			// keeps: longer than StalledAfter leases here.
			if _, err := store.Advertise(context.Background(), 5*L); err != nil {
				t.Fatal(err)
			}
			a := newEngine(t, store, "a", "", testTiming())
			a.mustServe(t)
			if err := store.Delete(context.Background(), a.o.Record().Revision); err != nil {
				t.Fatal(err)
			}
			time.Sleep(4 * L)
			wantState(t, a, domain.StateFenced)
			if a.o.Stalled() {
				t.Fatal("a holder waiting out a key made anew is stalled")
			}
			a.kill()
		})
	})
	t.Run("StandbyAndReleased", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			store := usedStore(t)
			a := newEngine(t, store, "a", "r1", testTiming())
			a.mustServe(t)
			b := newEngine(t, store, "b", "r2", testTiming())
			if out, err := b.claim(t, domain.RoleServe); err != nil || out != domain.OutcomeStandby {
				t.Fatalf("b: Claim = %v, %v; want standby", out, err)
			}
			_, stop := b.awaitInBackground()
			time.Sleep(10 * L)
			if b.o.Stalled() {
				t.Fatal("a standby is stalled")
			}
			stop()
			a.release(t)
			time.Sleep(10 * L)
			if a.o.Stalled() {
				t.Fatal("an engine that released the lease is stalled")
			}
		})
	})
}

// lateAnswers is a lease whose calls, once slowed, each answer lag after
// they begin, past their cut-off, as a store that checks why a call went
// unanswered may (domain.LeaseCallOverrun).
type lateAnswers struct {
	domain.Lease
	lag  time.Duration
	slow atomic.Bool
}

func (l *lateAnswers) wait() {
	if l.slow.Load() {
		time.Sleep(l.lag)
	}
}

func (l *lateAnswers) Read(ctx context.Context) (domain.Record, error) {
	defer l.wait()
	return l.Lease.Read(context.WithoutCancel(ctx))
}

func (l *lateAnswers) Create(ctx context.Context, h domain.Holder) (uint64, error) {
	defer l.wait()
	return l.Lease.Create(context.WithoutCancel(ctx), h)
}

func (l *lateAnswers) Update(ctx context.Context, h domain.Holder, rev uint64) (uint64, error) {
	defer l.wait()
	return l.Lease.Update(context.WithoutCancel(ctx), h, rev)
}

func (l *lateAnswers) Advertise(ctx context.Context, d time.Duration) (time.Duration, error) {
	defer l.wait()
	return l.Lease.Advertise(context.WithoutCancel(ctx), d)
}

// A renewal that finds its key deleted makes four calls (the update, a
// read, the longest lease's raise, the create), and each may answer up to
// LeaseCallOverrun past the renewal's cut-off: with a one-second lease
// that renewal takes more than three leases while its keeper turns. Before
// the fix only a renewal's end counted as an answer, so the holder was
// stalled and the liveness probe restarted it.
func TestAHolderWhoseRenewalTakesLongerThanThreeLeasesInAnsweredStepsIsNotStalled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		lag := L * 9 / 10
		if lag >= domain.LeaseCallOverrun {
			t.Fatalf("a lag of %v is past what a call may take, %v", lag, domain.LeaseCallOverrun)
		}
		// The Ownership calls the slow view itself: a view that gives up
		// at the cut-off would hide the lag.
		view := &lateAnswers{Lease: store, lag: lag}
		me := domain.Holder{InstanceID: domain.NewInstanceID(), Host: "host-a"}
		var longest atomic.Int64 // the longest renewal, in nanoseconds
		o, err := domain.NewOwnership(view, me, testTiming(), domain.WithLogger(slog.New(slog.DiscardHandler)),
			domain.WithRenewalObserver(func(_ bool, took time.Duration) {
				longest.Store(max(longest.Load(), int64(took)))
			}))
		if err != nil {
			t.Fatal(err)
		}
		if out, err := o.Claim(context.Background(), domain.RoleServe); err != nil || out != domain.OutcomeServe {
			t.Fatalf("Claim = %v, %v; want serve", out, err)
		}
		if err := store.Delete(context.Background(), o.Record().Revision); err != nil {
			t.Fatal(err)
		}
		view.slow.Store(true)
		for range 6 * 8 {
			time.Sleep(L / 8)
			if o.Stalled() {
				t.Errorf("a holder whose renewal's calls each answer within their bound is stalled (%s)", o.State())
				break
			}
		}
		if o.State() != domain.StateFenced {
			t.Errorf("state %s; want fenced, waiting out the key it made anew", o.State())
		}
		if took := time.Duration(longest.Load()); !t.Failed() && took < domain.StalledAfter*L {
			t.Errorf("the longest renewal took %v; the test needs one longer than %d leases", took, domain.StalledAfter)
		}
		view.slow.Store(false)
		if err := o.Release(context.Background()); err != nil {
			t.Error(err)
		}
	})
}
