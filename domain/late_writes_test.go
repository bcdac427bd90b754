package domain_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/lease/memory"
	"github.com/abi-engine/engine/domain"
)

// deleteKey deletes the lease key as an operator would, leaving a
// deletion marker.
func deleteKey(t *testing.T, store domain.Lease) {
	t.Helper()
	rec, err := store.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(context.Background(), rec.Revision); err != nil {
		t.Fatal(err)
	}
}

// lateCreates holds its creates at its gate while the gate holds, and lets
// them land when it opens: a request kept on its way by a stalled link, a
// client's reconnect buffer or a paused process, that reaches the store
// long after it was sent.
type lateCreates struct {
	domain.Lease
	gate
}

func (l *lateCreates) Create(ctx context.Context, h domain.Holder) (uint64, error) {
	l.pass()
	return l.Lease.Create(ctx, h)
}

// A contender's create over an empty key that lands late, after another
// engine made the key, served, and lost the key again (to a delete, or to
// the contender's own compaction of a stream made anew), is held a
// quarantine from its answer. Counted from before the create, it was
// already over, and the contender served beside the engine whose record
// its create replaced, until that one's next renewal.
func TestACreateAnsweredLateIsHeldFromItsAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New() // a key with no value: whoever makes it waits a quarantine
		view := &lateCreates{Lease: store}
		entered, letGo := view.hold()
		b := newEngine(t, view, "b", "", testTiming())
		claimed := make(chan error, 1)
		go func() {
			_, err := b.claim(t, domain.RoleServe)
			claimed <- err
		}()
		select {
		case <-entered:
		case <-time.After(L):
			t.Fatal("b never tried to make the key")
		}

		a := newEngine(t, store, "a", "", testTiming())
		a.mustServe(t)
		defer a.kill()
		time.Sleep(L / 8)
		deleteKey(t, store)
		stop := watchOverlap(a, b)
		letGo()
		time.Sleep(2 * L)
		if n := stop(); n > 0 {
			t.Fatalf("a and b both may serve in %d samples (a: %s; b: %s)", n, a.path(), b.path())
		}
		select {
		case err := <-claimed:
			if err != nil {
				t.Fatalf("b's claim: %v (%s)", err, b.path())
			}
		case <-time.After(L):
			t.Fatalf("b's claim never returned: %s", b.path())
		}
		if !b.o.MayServe() {
			t.Fatalf("b does not serve after its quarantine: %s", b.path())
		}
		b.release(t)
	})
}

// A holder's renewal that makes the key anew and never hears back leaves a
// doubt: the create may land at any time. When a later renewal finds our
// record, the key is held a quarantine from that finding. Counted from when
// the key was seen empty, a create that landed after another engine made
// the key, served and lost it to a second delete was served at once.
func TestARenewalsCreateThatLandsLateIsHeldFromWhenItIsFound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		view := &lateCreates{Lease: store}
		a := newEngine(t, view, "a", "", testTiming())
		a.mustServe(t)
		defer a.kill()

		// The key is deleted; a's renewal creates it again, and the
		// create is held on its way while a's link goes down.
		time.Sleep(L / 8)
		deleteKey(t, store)
		entered, letGo := view.hold()
		select {
		case <-entered:
		case <-time.After(L):
			t.Fatalf("a never made the key anew: %s", a.path())
		}
		a.store.Cut(true)

		// c makes the key, waits its quarantine and serves.
		c := newEngine(t, store, "c", "", testTiming())
		c.mustServe(t)
		defer c.kill()
		// Between two of c's renewals, which come every quarter lease
		// from now: at the very instant of one, the renewal and the
		// delete below race, and either may come first.
		time.Sleep(2*L + L/8)
		if !c.o.MayServe() {
			t.Fatalf("c does not serve: %s", c.path())
		}

		// A second delete; a's create lands, and a's link comes back,
		// while c's next renewal is slow on its way.
		deleteKey(t, store)
		c.store.Delay(L, 0)
		stop := watchOverlap(a, c)
		letGo()
		synctest.Wait()
		a.store.Cut(false)
		time.Sleep(2 * L)
		if n := stop(); n > 0 {
			t.Fatalf("a and c both may serve in %d samples (a: %s; c: %s)", n, a.path(), c.path())
		}
		if !a.o.MayServe() {
			t.Fatalf("a, whose record holds the key, does not serve after its quarantine: %s", a.path())
		}
		c.store.Delay(0, 0)
		time.Sleep(2 * L) // c's held renewals land before the bubble ends
	})
}

// takenOnce is a lease whose next create, once armed, lands and then says
// the key was taken: what a create answers when its write landed and a
// follow-up failed, or when it read a replica that had not yet seen the
// delete.
type takenOnce struct {
	domain.Lease
	armed atomic.Bool
}

func (l *takenOnce) Create(ctx context.Context, h domain.Holder) (uint64, error) {
	rev, err := l.Lease.Create(ctx, h)
	if err == nil && l.armed.CompareAndSwap(true, false) {
		return 0, fmt.Errorf("create the lease: %w", domain.ErrLeaseTaken)
	}
	return rev, err
}

// A renewal's create that says the key was taken is read back, as a
// takeover's is: when our record holds the key, the lease is not lost,
// and the key is held a quarantine from that read.
func TestARenewalsCreateSaidTakenIsReadBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		view := &takenOnce{Lease: store}
		a := newEngine(t, view, "a", "", testTiming())
		a.mustServe(t)
		defer a.release(t)
		time.Sleep(L / 8)
		deleteKey(t, store)
		view.armed.Store(true)
		time.Sleep(L / 4)
		synctest.Wait()
		if a.o.State() == domain.StateLost {
			rec, _ := store.Read(context.Background())
			t.Fatalf("a's record holds the key (revision %d, ours: %v) and a calls the lease lost: %s",
				rec.Revision, rec.Holder.InstanceID == a.o.Me().InstanceID, a.path())
		}
		time.Sleep(2 * L)
		if !a.o.MayServe() {
			t.Fatalf("a does not serve after its quarantine: %s", a.path())
		}
	})
}

// misreadOnce is a lease whose next renewal, once armed, is misread: its
// write is refused as a conflict that was not one (a replicated stream
// with another write in flight), the read that follows says the key has
// no value though it holds ours (a replica behind), and the create then
// gets no answer.
type misreadOnce struct {
	domain.Lease
	update, read, create atomic.Bool
}

func (l *misreadOnce) arm() { l.update.Store(true); l.read.Store(true); l.create.Store(true) }

func (l *misreadOnce) Update(ctx context.Context, h domain.Holder, rev uint64) (uint64, error) {
	if l.update.CompareAndSwap(true, false) {
		return 0, fmt.Errorf("update the lease: %w", domain.ErrLeaseConflict)
	}
	return l.Lease.Update(ctx, h, rev)
}

func (l *misreadOnce) Read(ctx context.Context) (domain.Record, error) {
	if l.read.CompareAndSwap(true, false) {
		return domain.Record{}, nil
	}
	return l.Lease.Read(ctx)
}

func (l *misreadOnce) Create(ctx context.Context, h domain.Holder) (uint64, error) {
	if l.create.CompareAndSwap(true, false) {
		return 0, errors.New("create the lease: no answer")
	}
	return l.Lease.Create(ctx, h)
}

// A create of unknown outcome is settled by a later renewal that writes
// over our record at the revision we held: the key had a value all along,
// so the create never landed and never can. Left open, it kept the
// release that followed from handing over, and the successor waited a
// lease.
func TestARenewalOverOurRecordSettlesACreateOfUnknownOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := usedStore(t)
		view := &misreadOnce{Lease: store}
		a := newEngine(t, view, "a", "", testTiming())
		a.mustServe(t)
		time.Sleep(L / 8)
		view.arm() // the renewal at L/4 is misread; the one after it writes
		time.Sleep(L / 4)
		synctest.Wait()
		if !a.o.MayServe() {
			t.Fatalf("a does not serve: %s", a.path())
		}
		a.release(t)
		if !a.o.HandedOver() {
			t.Fatalf("a's release handed nothing over after a renewal settled the create: %s", a.path())
		}
	})
}
