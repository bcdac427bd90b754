package contracttests

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/ports"
)

// raceRounds is how many times the two-handle races run.
const raceRounds = 50

// RunLease holds a lease adapter to the contract the ownership state
// machine relies on.
func RunLease(t *testing.T, h Harness[ports.Lease]) {
	cases := []struct {
		name string
		run  func(t *testing.T, open func(t *testing.T) ports.Lease)
	}{
		{"EmptyStoreHasNoRecord", leaseEmptyStoreHasNoRecord},
		{"CreateRecordsTheHolder", leaseCreateRecordsTheHolder},
		{"CreateFailsWhileHeld", leaseCreateFailsWhileHeld},
		{"UpdateMovesTheRevisionForward", leaseUpdateMovesTheRevisionForward},
		{"UpdateWithTheSameHolderMovesTheRevision", leaseUpdateWithTheSameHolderMovesTheRevision},
		{"UpdateAtAStaleRevisionConflicts", leaseUpdateAtAStaleRevisionConflicts},
		{"UpdateOfAMissingRecordConflicts", leaseUpdateOfAMissingRecordConflicts},
		{"DeleteFreesTheLease", leaseDeleteFreesTheLease},
		{"DeleteAtAStaleRevisionConflicts", leaseDeleteAtAStaleRevisionConflicts},
		{"ReleasedRecordReadsAsFree", leaseReleasedRecordReadsAsFree},
		{"WaitForChangeReturnsTheRecordAfterTheTimeout", leaseWaitReturnsAfterTheTimeout},
		{"WaitForChangeWakesOnAnUpdate", leaseWaitWakesOnAnUpdate},
		{"WaitForChangeWakesOnADelete", leaseWaitWakesOnADelete},
		{"WaitForChangeFromEmptyWakesOnACreate", leaseWaitFromEmptyWakesOnACreate},
		{"WaitForChangeReturnsAtOnceIfAlreadyChanged", leaseWaitReturnsAtOnceIfChanged},
		{"WaitForChangeEndsWithItsContext", leaseWaitEndsWithItsContext},
		{"CreateRace", leaseCreateRace},
		{"UpdateRace", leaseUpdateRace},
		{"LostUpdateReplyIsRecognisable", leaseLostUpdateReplyIsRecognisable},
		{"DeleteThenCreateIsNeverMissed", leaseDeleteThenCreateIsNeverMissed},
		{"AdvertiseKeepsTheLongestLease", leaseAdvertiseKeepsTheLongest},
		{"AdvertiseOutlivesADeleteOfTheKey", leaseAdvertiseOutlivesADelete},
		{"AdvertiseRace", leaseAdvertiseRace},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newStore(t, h))
		})
	}
}

func holder(name string) domain.Holder {
	return domain.Holder{
		InstanceID: domain.NewInstanceID(),
		Host:       "host-" + name,
		PID:        4242,
		Version:    "1.2.3",
		RolloutID:  "r-" + name,
		StartedAt:  time.Date(2026, 12, 2, 10, 2, 11, 0, time.UTC),
	}
}

func sameHolder(t *testing.T, got, want domain.Holder) {
	t.Helper()
	if !got.StartedAt.Equal(want.StartedAt) {
		t.Fatalf("holder started at %v, want %v", got.StartedAt, want.StartedAt)
	}
	got.StartedAt = want.StartedAt
	if got != want {
		t.Fatalf("holder %+v, want %+v", got, want)
	}
}

func mustCreate(t *testing.T, l ports.Lease, h domain.Holder) uint64 {
	t.Helper()
	rev, err := l.Create(ctx(t), h)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if rev == 0 {
		t.Fatalf("Create returned revision 0")
	}
	return rev
}

func mustRead(t *testing.T, l ports.Lease) domain.Record {
	t.Helper()
	rec, err := l.Read(ctx(t))
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return rec
}

func leaseEmptyStoreHasNoRecord(t *testing.T, open func(t *testing.T) ports.Lease) {
	rec := mustRead(t, open(t))
	if rec.Present || rec.Revision != 0 || !rec.Free() {
		t.Fatalf("empty store reads %+v, want no record at revision 0", rec)
	}
}

func leaseCreateRecordsTheHolder(t *testing.T, open func(t *testing.T) ports.Lease) {
	l := open(t)
	h := holder("a")
	rev := mustCreate(t, l, h)
	rec := mustRead(t, l)
	if !rec.Present || rec.Revision != rev || rec.Free() {
		t.Fatalf("after Create at %d, Read gives %+v", rev, rec)
	}
	sameHolder(t, rec.Holder, h)
}

func leaseCreateFailsWhileHeld(t *testing.T, open func(t *testing.T) ports.Lease) {
	l := open(t)
	a := holder("a")
	rev := mustCreate(t, l, a)
	if _, err := l.Create(ctx(t), holder("b")); !errors.Is(err, domain.ErrLeaseTaken) {
		t.Fatalf("second Create: err %v, want ErrLeaseTaken", err)
	}
	rec := mustRead(t, l)
	if rec.Revision != rev {
		t.Fatalf("revision %d after a refused Create, want %d", rec.Revision, rev)
	}
	sameHolder(t, rec.Holder, a)
}

func leaseUpdateMovesTheRevisionForward(t *testing.T, open func(t *testing.T) ports.Lease) {
	l := open(t)
	rev := mustCreate(t, l, holder("a"))
	b := holder("b")
	next, err := l.Update(ctx(t), b, rev)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if next <= rev {
		t.Fatalf("Update gave revision %d, want more than %d", next, rev)
	}
	rec := mustRead(t, l)
	if rec.Revision != next {
		t.Fatalf("Read revision %d, want %d", rec.Revision, next)
	}
	sameHolder(t, rec.Holder, b)
}

func leaseUpdateWithTheSameHolderMovesTheRevision(t *testing.T, open func(t *testing.T) ports.Lease) {
	l := open(t)
	a := holder("a")
	rev := mustCreate(t, l, a)
	next, err := l.Update(ctx(t), a, rev)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if next <= rev {
		t.Fatalf("renewal gave revision %d, want more than %d", next, rev)
	}
}

func leaseUpdateAtAStaleRevisionConflicts(t *testing.T, open func(t *testing.T) ports.Lease) {
	l := open(t)
	a := holder("a")
	stale := mustCreate(t, l, a)
	cur, err := l.Update(ctx(t), a, stale)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if _, err := l.Update(ctx(t), holder("b"), stale); !errors.Is(err, domain.ErrLeaseConflict) {
		t.Fatalf("Update at stale revision: err %v, want ErrLeaseConflict", err)
	}
	rec := mustRead(t, l)
	if rec.Revision != cur {
		t.Fatalf("revision %d after a refused Update, want %d", rec.Revision, cur)
	}
	sameHolder(t, rec.Holder, a)
}

func leaseUpdateOfAMissingRecordConflicts(t *testing.T, open func(t *testing.T) ports.Lease) {
	l := open(t)
	if _, err := l.Update(ctx(t), holder("a"), 1); !errors.Is(err, domain.ErrLeaseConflict) {
		t.Fatalf("Update on an empty store: err %v, want ErrLeaseConflict", err)
	}
	if rec := mustRead(t, l); rec.Present {
		t.Fatalf("a refused Update wrote %+v", rec)
	}
}

func leaseDeleteFreesTheLease(t *testing.T, open func(t *testing.T) ports.Lease) {
	l := open(t)
	rev := mustCreate(t, l, holder("a"))
	if err := l.Delete(ctx(t), rev); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	rec := mustRead(t, l)
	if rec.Present || !rec.Free() {
		t.Fatalf("after Delete, Read gives %+v", rec)
	}
	if !rec.Deleted() || rec.Revision <= rev {
		t.Fatalf("a deleted key reads at revision %d, want a deletion after %d", rec.Revision, rev)
	}
	next := mustCreate(t, l, holder("b"))
	if next <= rec.Revision {
		t.Fatalf("Create after Delete gave revision %d, want more than %d", next, rec.Revision)
	}
}

func leaseDeleteAtAStaleRevisionConflicts(t *testing.T, open func(t *testing.T) ports.Lease) {
	l := open(t)
	a := holder("a")
	stale := mustCreate(t, l, a)
	cur, err := l.Update(ctx(t), a, stale)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if err := l.Delete(ctx(t), stale); !errors.Is(err, domain.ErrLeaseConflict) {
		t.Fatalf("Delete at stale revision: err %v, want ErrLeaseConflict", err)
	}
	rec := mustRead(t, l)
	if !rec.Present || rec.Revision != cur {
		t.Fatalf("after a refused Delete, Read gives %+v, want the record at %d", rec, cur)
	}
}

func leaseReleasedRecordReadsAsFree(t *testing.T, open func(t *testing.T) ports.Lease) {
	l := open(t)
	a := holder("a")
	rev := mustCreate(t, l, a)
	a.Released = true
	rel, err := l.Update(ctx(t), a, rev)
	if err != nil {
		t.Fatalf("Update to released: %v", err)
	}
	rec := mustRead(t, l)
	if !rec.Present || !rec.Free() || rec.Revision != rel {
		t.Fatalf("released record reads %+v, want present and free at %d", rec, rel)
	}
	sameHolder(t, rec.Holder, a)
	if _, err := l.Create(ctx(t), holder("b")); !errors.Is(err, domain.ErrLeaseTaken) {
		t.Fatalf("Create over a released record: err %v, want ErrLeaseTaken (take it by Update)", err)
	}
	if _, err := l.Update(ctx(t), holder("b"), rel); err != nil {
		t.Fatalf("Update over a released record: %v", err)
	}
}

func leaseWaitReturnsAfterTheTimeout(t *testing.T, open func(t *testing.T) ports.Lease) {
	l := open(t)
	rev := mustCreate(t, l, holder("a"))
	const timeout = 300 * time.Millisecond
	start := time.Now()
	rec, err := l.WaitForChange(ctx(t), rev, timeout)
	if err != nil {
		t.Fatalf("WaitForChange: %v", err)
	}
	if waited := time.Since(start); waited < timeout-50*time.Millisecond {
		t.Fatalf("WaitForChange returned after %v, before its timeout of %v", waited, timeout)
	}
	if rec.Revision != rev || !rec.Present {
		t.Fatalf("WaitForChange gave %+v, want the record at %d", rec, rev)
	}
}

// waited is what a background WaitForChange returned.
type waited struct {
	rec domain.Record
	err error
}

// waitInBackground starts WaitForChange and returns where its result lands.
// The goroutine reports nothing to t itself: it may outlive a subtest that
// failed early, and a report after the end panics the whole test binary.
func waitInBackground(t *testing.T, l ports.Lease, rev uint64) <-chan waited {
	t.Helper()
	out := make(chan waited, 1)
	c := ctx(t)
	go func() {
		rec, err := l.WaitForChange(c, rev, callTimeout/2)
		out <- waited{rec, err}
	}()
	return out
}

// changed waits for a background WaitForChange that must see a change.
func changed(t *testing.T, got <-chan waited, from uint64) domain.Record {
	t.Helper()
	select {
	case w := <-got:
		if w.err != nil {
			t.Fatalf("WaitForChange from revision %d: %v", from, w.err)
		}
		if w.rec.Revision == from {
			t.Fatalf("WaitForChange timed out at revision %d: it missed a change", from)
		}
		return w.rec
	case <-time.After(callTimeout):
		t.Fatalf("WaitForChange from revision %d hung", from)
	}
	return domain.Record{}
}

func leaseWaitWakesOnAnUpdate(t *testing.T, open func(t *testing.T) ports.Lease) {
	l, other := open(t), open(t)
	a := holder("a")
	rev := mustCreate(t, l, a)
	got := waitInBackground(t, l, rev)
	time.Sleep(100 * time.Millisecond) // let the watch start, so it sees the write live
	next, err := other.Update(ctx(t), a, rev)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if rec := changed(t, got, rev); rec.Revision != next || !rec.Present {
		t.Fatalf("woke with %+v, want the record at %d", rec, next)
	}
}

func leaseWaitWakesOnADelete(t *testing.T, open func(t *testing.T) ports.Lease) {
	l, other := open(t), open(t)
	rev := mustCreate(t, l, holder("a"))
	got := waitInBackground(t, l, rev)
	time.Sleep(100 * time.Millisecond)
	if err := other.Delete(ctx(t), rev); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if rec := changed(t, got, rev); rec.Present || !rec.Deleted() {
		t.Fatalf("woke with %+v, want a deleted key", rec)
	}
}

func leaseWaitFromEmptyWakesOnACreate(t *testing.T, open func(t *testing.T) ports.Lease) {
	l, other := open(t), open(t)
	got := waitInBackground(t, l, 0)
	time.Sleep(100 * time.Millisecond)
	a := holder("a")
	rev := mustCreate(t, other, a)
	rec := changed(t, got, 0)
	if rec.Revision != rev || !rec.Present {
		t.Fatalf("woke with %+v, want the record at %d", rec, rev)
	}
	sameHolder(t, rec.Holder, a)
}

func leaseWaitReturnsAtOnceIfChanged(t *testing.T, open func(t *testing.T) ports.Lease) {
	l := open(t)
	a := holder("a")
	old := mustCreate(t, l, a)
	cur, err := l.Update(ctx(t), a, old)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	// The timeout is the suite's whole budget: returning at all means it did
	// not wait for it.
	rec, err := l.WaitForChange(ctx(t), old, callTimeout)
	if err != nil {
		t.Fatalf("WaitForChange: %v", err)
	}
	if rec.Revision != cur {
		t.Fatalf("WaitForChange gave revision %d, want %d", rec.Revision, cur)
	}
}

func leaseWaitEndsWithItsContext(t *testing.T, open func(t *testing.T) ports.Lease) {
	l := open(t)
	rev := mustCreate(t, l, holder("a"))
	c, cancel := contextWithCancel(t)
	done := make(chan error, 1)
	go func() {
		_, err := l.WaitForChange(c, rev, callTimeout)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("WaitForChange returned no error after its context ended")
		}
	case <-time.After(callTimeout / 2):
		t.Fatalf("WaitForChange ignored its context")
	}
}

// race runs f on two handles at once and returns how many succeeded.
func race(t *testing.T, a, b ports.Lease, f func(l ports.Lease) error) int {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	start := make(chan struct{})
	for i, l := range []ports.Lease{a, b} {
		wg.Go(func() {
			<-start
			errs[i] = f(l)
		})
	}
	close(start)
	wg.Wait()
	won := 0
	for _, err := range errs {
		if err == nil {
			won++
		}
	}
	return won
}

func leaseCreateRace(t *testing.T, open func(t *testing.T) ports.Lease) {
	a, b := open(t), open(t)
	for round := range raceRounds {
		won := race(t, a, b, func(l ports.Lease) error {
			_, err := l.Create(ctx(t), holder("racer"))
			if err != nil && !errors.Is(err, domain.ErrLeaseTaken) {
				t.Errorf("round %d: Create: %v", round, err)
			}
			return err
		})
		if won != 1 {
			t.Fatalf("round %d: %d creates won, want exactly 1", round, won)
		}
		rec := mustRead(t, a)
		if err := a.Delete(ctx(t), rec.Revision); err != nil {
			t.Fatalf("round %d: Delete: %v", round, err)
		}
	}
}

func leaseUpdateRace(t *testing.T, open func(t *testing.T) ports.Lease) {
	a, b := open(t), open(t)
	rev := mustCreate(t, a, holder("a"))
	for round := range raceRounds {
		won := race(t, a, b, func(l ports.Lease) error {
			_, err := l.Update(ctx(t), holder("racer"), rev)
			if err != nil && !errors.Is(err, domain.ErrLeaseConflict) {
				t.Errorf("round %d: Update: %v", round, err)
			}
			return err
		})
		if won != 1 {
			t.Fatalf("round %d: %d updates at revision %d won, want exactly 1", round, won, rev)
		}
		rev = mustRead(t, a).Revision
	}
}

// A holder whose renewal reply is lost must be able to tell, by reading, that
// the write went through: its own instance id at a newer revision.
func leaseLostUpdateReplyIsRecognisable(t *testing.T, open func(t *testing.T) ports.Lease) {
	l := open(t)
	a := holder("a")
	rev := mustCreate(t, l, a)
	if _, err := l.Update(ctx(t), a, rev); err != nil { // the reply the holder never sees
		t.Fatalf("Update: %v", err)
	}
	_, err := l.Update(ctx(t), a, rev)
	if !errors.Is(err, domain.ErrLeaseConflict) {
		t.Fatalf("retry at the old revision: err %v, want ErrLeaseConflict", err)
	}
	rec := mustRead(t, l)
	if !rec.Present || rec.Holder.InstanceID != a.InstanceID || rec.Revision <= rev {
		t.Fatalf("Read gives %+v, want our own instance %s after revision %d", rec, a.InstanceID, rev)
	}
	if _, err := l.Update(ctx(t), a, rec.Revision); err != nil {
		t.Fatalf("Update at the revision read back: %v", err)
	}
}

// A waiter that started before a release and a new claim must wake, whatever
// it then reads: a delete followed at once by a create is never lost.
func leaseDeleteThenCreateIsNeverMissed(t *testing.T, open func(t *testing.T) ports.Lease) {
	l, other := open(t), open(t)
	for round := range 10 {
		rev := mustCreate(t, l, holder("a"))
		got := waitInBackground(t, l, rev)
		time.Sleep(20 * time.Millisecond)
		if err := other.Delete(ctx(t), rev); err != nil {
			t.Fatalf("round %d: Delete: %v", round, err)
		}
		next := mustCreate(t, other, holder("b"))
		rec := changed(t, got, rev)
		if rec.Revision <= rev || rec.Revision > next {
			t.Fatalf("round %d: woke at revision %d, want after %d and at most %d", round, rec.Revision, rev, next)
		}
		if err := other.Delete(ctx(t), next); err != nil {
			t.Fatalf("round %d: Delete: %v", round, err)
		}
	}
}

func mustAdvertise(t *testing.T, l ports.Lease, d time.Duration) time.Duration {
	t.Helper()
	got, err := l.Advertise(ctx(t), d)
	if err != nil {
		t.Fatalf("Advertise(%v): %v", d, err)
	}
	return got
}

func leaseAdvertiseKeepsTheLongest(t *testing.T, open func(t *testing.T) ports.Lease) {
	a, b := open(t), open(t)
	if got := mustAdvertise(t, a, 20*time.Second); got != 20*time.Second {
		t.Fatalf("Advertise(20s) on a new store = %v, want 20s", got)
	}
	if got := mustAdvertise(t, b, 5*time.Second); got != 20*time.Second {
		t.Fatalf("Advertise(5s) after 20s = %v, want 20s: it only grows", got)
	}
	if got := mustAdvertise(t, b, 30*time.Second); got != 30*time.Second {
		t.Fatalf("Advertise(30s) after 20s = %v, want 30s", got)
	}
	if got := mustAdvertise(t, a, time.Second); got != 30*time.Second {
		t.Fatalf("Advertise(1s) on the other handle = %v, want 30s", got)
	}
	if rec := mustRead(t, a); rec.Present || rec.Revision != 0 {
		t.Fatalf("Advertise touched the lease key: %+v", rec)
	}
}

func leaseAdvertiseOutlivesADelete(t *testing.T, open func(t *testing.T) ports.Lease) {
	a, b := open(t), open(t)
	mustAdvertise(t, a, time.Minute)
	rev := mustCreate(t, a, holder("a"))
	if rec := mustRead(t, b); !rec.Present || rec.Revision != rev {
		t.Fatalf("after Advertise and Create, Read gives %+v, want the record at %d", rec, rev)
	}
	if err := a.Delete(ctx(t), rev); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if got := mustAdvertise(t, b, time.Second); got != time.Minute {
		t.Fatalf("after a delete of the key, Advertise(1s) = %v, want the minute advertised before", got)
	}
}

func leaseAdvertiseRace(t *testing.T, open func(t *testing.T) ports.Lease) {
	a, b := open(t), open(t)
	for round := 1; round <= 20; round++ {
		short, long := time.Duration(round)*time.Second, time.Duration(round)*time.Second+time.Second/2
		var wg sync.WaitGroup
		for _, c := range []struct {
			l ports.Lease
			d time.Duration
		}{{a, short}, {b, long}} {
			wg.Go(func() {
				if _, err := c.l.Advertise(ctx(t), c.d); err != nil {
					t.Errorf("round %d: Advertise(%v): %v", round, c.d, err)
				}
			})
		}
		wg.Wait()
		if got := mustAdvertise(t, a, 0); got != long {
			t.Fatalf("round %d: after %v and %v raced, the store keeps %v", round, short, long, got)
		}
	}
}
