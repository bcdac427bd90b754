package domain_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/leasetest"
)

// takeoverScript is a contender's view of the lease in which its first
// takeover lands unanswered and its second is refused at once, without
// reaching the store. landed runs as the first one lands.
type takeoverScript struct {
	domain.Lease
	landed func()

	mu      sync.Mutex
	updates int
}

func (s *takeoverScript) Update(ctx context.Context, h domain.Holder, rev uint64) (uint64, error) {
	s.mu.Lock()
	s.updates++
	n := s.updates
	s.mu.Unlock()
	if n == 2 {
		return 0, leasetest.ErrFault
	}
	newRev, err := s.Lease.Update(ctx, h, rev)
	if n == 1 && err == nil {
		s.landed()
	}
	return newRev, err
}

// servedFor is when e began to serve, and when it stopped (or now, if it
// still serves); ok is false when it never served. The instants are of the
// bubble's clock, so that two engines' spans compare.
func (e *testEngine) servedFor() (from, to time.Time, ok bool) {
	synctest.Wait()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.events {
		switch {
		case !ok && ev.tr.To == domain.StateServing:
			from, ok = e.start.Add(ev.at), true
		case ok && ev.tr.To != domain.StateServing:
			return from, e.start.Add(ev.at), true
		}
	}
	return from, time.Now(), ok
}

// A takeover whose reply was lost, found ours by the read-back of a later
// attempt, was taken for that later attempt's write: the engine served until
// half a lease after the later attempt began. But the record landed with the
// first attempt, and a third engine that saw it land counted its lease of
// silence from then, so it took the lease over while the first still served.
// What landed unanswered says nothing of when it landed: it is held the
// quarantine before serving, as a record of ours found by a read is.
func TestATakeoverFoundByALaterAttemptIsNotServedAsThatAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		a := newEngine(t, store, "a", "v1", testTiming())
		a.mustServe(t)
		defer a.kill()

		script := &takeoverScript{Lease: store}
		b := newEngine(t, script, "b", "v2", testTiming())
		defer b.kill()
		script.landed = func() { b.store.Cut(true) } // nothing b sends next is answered
		b.store.LoseReplies(1)
		if out, _ := b.claim(t, domain.RoleServe); out != domain.OutcomeStandby {
			t.Fatalf("b: Claim = %v, want standby", out)
		}
		_, stopB := b.awaitInBackground()
		defer stopB()

		time.Sleep(L / 10)
		a.store.Cut(true) // a's last renewal was at 0; it dies now

		time.Sleep(L/2 - L/10)
		c := newEngine(t, store, "c", "v3", testTiming())
		defer c.kill()
		if out, _ := c.claim(t, domain.RoleServe); out != domain.OutcomeStandby {
			t.Fatalf("c: Claim = %v, want standby", out)
		}
		_, stopC := c.awaitInBackground()
		defer stopC()

		// At L, b's takeover lands unanswered: c sees it land, and takes
		// over a lease later, at 2L, unless b renews. b's read-back gives
		// up at 1.25L, and the read after its pause hangs until the cut
		// ends at 1.625L. Its next attempt, at 1.875L, is refused, and its
		// read-back finds b's record: taken for that attempt's, it is
		// served until 2.375L.
		time.Sleep(L + L/8)
		b.store.Cut(false)
		time.Sleep(3 * L)

		bFrom, bTo, bServed := b.servedFor()
		cFrom, cTo, cServed := c.servedFor()
		if bServed && cServed && bFrom.Before(cTo) && cFrom.Before(bTo) {
			t.Fatalf("b served from %v to %v and c from %v to %v: both at once (b: %s; c from L/2: %s)",
				bFrom.Sub(a.start), bTo.Sub(a.start), cFrom.Sub(a.start), cTo.Sub(a.start), b.path(), c.path())
		}
		if !bServed && !cServed {
			t.Fatalf("neither b nor c served (b: %s; c: %s)", b.path(), c.path())
		}
	})
}
