package domain_test

import (
	"context"
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
