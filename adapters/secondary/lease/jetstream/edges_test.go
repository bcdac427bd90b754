package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/abi-engine/engine/adapters/secondary/lease/jetstream"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
)

// A purge of the lease stream leaves the key with no history: a contender
// that creates it waits half a lease, by when the holder has seen the new
// record and stopped. Before, it served at once beside the holder.
//
// The case needs b's create to reach the empty key before a's next renewal
// makes it anew. On a loaded machine a's renewal may come first: b then
// finds a holding, which is safe but not the case, and the test tries
// again on a new bucket.
func TestRealBrokerAContenderAfterAPurgeWaitsForTheHolderToStop(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	nc := natstest.Connect(t, url)
	const tries = 5
	for try := range tries {
		bucket := fmt.Sprintf("PURGED%d", try)
		a := startEngine(t, url, bucket, "a", "")
		a.mustClaim(t, domain.OutcomeServe)
		// b is connected before the purge, so its claim follows it within
		// a round trip or two, usually before a's next renewal.
		b := startEngine(t, url, bucket, "b", "")
		// What `nats stream purge` sends: it leaves no deletion marker.
		if _, err := nc.Request("$JS.API.STREAM.PURGE.KV_"+bucket, nil, 5*time.Second); err != nil {
			t.Fatalf("purge: %v", err)
		}
		got, err := b.claim(t)
		if errors.Is(err, domain.ErrAlreadyServing) {
			// a renewed first and holds the key it made anew. Its renewal
			// raised the longest lease first, a few round trips, and on a
			// loaded machine may have ended past a's fence: then a serves
			// again once it holds the key it made, and nobody serves
			// meanwhile. b must not have been refused for an engine that
			// never serves again.
			if !servesAgain(a.o, eventWait) {
				t.Fatalf("b was refused for a, but a did not serve again within %v (a is %s)", eventWait, a.o.State())
			}
			t.Logf("try %d: a made the key anew before b's claim; trying again", try+1)
			continue
		}
		if err != nil || got != domain.OutcomeServe {
			t.Fatalf("b: Claim = %v, %v; want serve", got, err)
		}
		if a.o.MayServe() {
			t.Fatalf("b serves while a, the holder before the purge, may still serve (a is %s)", a.o.State())
		}
		a.waitFor(t, domain.StateLost)
		return
	}
	t.Fatalf("in %d tries, a always renewed before b's claim: the case was never reached", tries)
}

// A bucket deleted under the holder is made anew by it, and it serves again
// half a lease later. Before, its renewals failed and it stayed fenced.
func TestRealBrokerAHolderMakesADeletedBucketAnew(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	a := startEngine(t, url, "GONE", "a", "")
	a.mustClaim(t, domain.OutcomeServe)
	js, err := njs.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(t.Context(), "GONE"); err != nil {
		t.Fatalf("delete the bucket: %v", err)
	}
	before := a.o.Record().Revision
	a.waitFor(t, domain.StateFenced)
	a.waitFor(t, domain.StateServing)
	if _, err := js.KeyValue(t.Context(), "GONE"); err != nil {
		t.Fatalf("the bucket was not made anew: %v", err)
	}
	// The revisions, and so the fencing tokens, go on from the old bucket's.
	if term, _ := a.o.Term(); term <= before {
		t.Fatalf("serving under term %d in the new bucket, not above %d of the old one", term, before)
	}
}

// A standby whose holder died and whose bucket was deleted makes it anew
// and takes the lease. Before, it waited for ever.
func TestRealBrokerAStandbyMakesADeletedBucketAnew(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	a := startEngine(t, url, "GONE2", "a", "v1")
	a.mustClaim(t, domain.OutcomeServe)
	b := startEngine(t, url, "GONE2", "b", "v2")
	b.mustClaim(t, domain.OutcomeStandby)
	done := b.await(t)
	a.nc.Close()
	js, err := njs.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(t.Context(), "GONE2"); err != nil {
		t.Fatalf("delete the bucket: %v", err)
	}
	// Finding the bucket gone takes a few calls that each wait for an
	// answer that does not come; on a busy machine they add up.
	const gone = 3 * eventWait
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("AwaitLease: %v", err)
		}
	case <-time.After(gone):
		t.Fatalf("the standby did not take the lease within %v of the bucket's deletion (%s)", gone, b.o.State())
	}
	if !b.o.MayServe() {
		t.Fatalf("the standby took the lease but may not serve")
	}
}

// A standby that only watched the lease knows every revision its watch
// delivered, so a bucket it makes anew goes on above the term of the
// holder it watched. Before, the watch's revisions were not counted: the
// standby made the bucket anew from the last revision it had read, and
// took the lease under the very term of the holder it followed, whose
// paused writes the stores would then take, as they refuse only older
// terms. (The bucket made anew now also goes on from the clock, which
// alone passes this test; TestAWatchCountsTheRevisionsItDelivers holds
// the watch's share.)
//
// The case needs c to take over from a by silence while b waits, so that
// b learns of c's term only through its watch: b becomes a standby half a
// lease after c last saw a, so its own lease of silence ends later. On a
// loaded machine c may take over before b reads, or b may come first;
// either way the test tries again on a new bucket.
func TestRealBrokerAStandbyThatOnlyWatchedGoesOnAboveTheHoldersTerm(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	js, err := njs.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	const tries = 5
	for try := range tries {
		bucket := fmt.Sprintf("WATCHED%d", try)
		a := startEngine(t, url, bucket, "a", "v1")
		a.mustClaim(t, domain.OutcomeServe)
		c := startEngine(t, url, bucket, "c", "v2")
		c.mustClaim(t, domain.OutcomeStandby)
		cDone := c.await(t)
		a.nc.Close() // a crashes: c takes over after a lease of silence
		deadline := time.Now().Add(eventWait)
		for c.o.State() == domain.StateStandby && c.o.SinceChange() < realLease/2 {
			if time.Now().After(deadline) {
				t.Fatalf("c saw a change %v ago, %v after a crashed", c.o.SinceChange(), eventWait)
			}
			time.Sleep(5 * time.Millisecond)
		}
		b := startEngine(t, url, bucket, "b", "v3")
		b.mustClaim(t, domain.OutcomeStandby)
		if b.o.Record().Holder.InstanceID != a.o.Me().InstanceID {
			t.Logf("try %d: c took over before b read the lease; trying again", try+1)
			continue
		}
		bDone := b.await(t)
		select {
		case err := <-cDone:
			if err != nil {
				t.Fatalf("c: AwaitLease: %v", err)
			}
		case err := <-bDone:
			t.Logf("try %d: b took the lease before c (%v); trying again", try+1, err)
			continue
		case <-time.After(eventWait):
			t.Fatalf("c did not take the lease within %v of a's crash (c is %s)", eventWait, c.o.State())
		}
		term, _ := c.o.Term()
		// b now only watches c's renewals; two of them reach it before c
		// stops.
		deadline = time.Now().Add(eventWait)
		for b.o.Record().Revision < term+2 {
			if time.Now().After(deadline) {
				t.Fatalf("b saw revision %d, not c's renewals past its term %d (b is %s)", b.o.Record().Revision, term, b.o.State())
			}
			time.Sleep(5 * time.Millisecond)
		}
		seen := b.o.Record().Revision

		// c pauses, as far as the broker can tell, and the bucket is
		// deleted.
		c.nc.Close()
		if err := js.DeleteKeyValue(t.Context(), bucket); err != nil {
			t.Fatalf("delete the bucket: %v", err)
		}
		// Finding the bucket gone takes a few calls that each wait for an
		// answer that does not come; on a busy machine they add up.
		const gone = 3 * eventWait
		select {
		case err := <-bDone:
			if err != nil {
				t.Fatalf("b: AwaitLease: %v", err)
			}
		case <-time.After(gone):
			t.Fatalf("b did not take the lease within %v of the bucket's deletion (b is %s)", gone, b.o.State())
		}
		got, _ := b.o.Term()
		aTerm, _ := a.o.Term()
		t.Logf("a's term %d; c took over at term %d; b saw revision %d and took the new bucket at term %d",
			aTerm, term, seen, got)
		if got <= seen {
			t.Fatalf("b took the new bucket under term %d, not above revision %d it saw c write (c's term %d)", got, seen, term)
		}
		return
	}
	t.Fatalf("in %d tries, c never took over while b waited: the case was never reached", tries)
}

// A lease that makes a deleted bucket anew goes on above terms it never
// saw: here another engine took the lease in a write the first never read
// before the bucket was deleted. Before, the new bucket went on from the
// highest revision this engine saw, and handed out that other engine's
// term a second time.
func TestRealBrokerABucketMadeAnewGoesOnAboveWritesItNeverSaw(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	const bucket = "UNSEEN"
	mine := open(t, url, jetstream.Options{Bucket: bucket})
	other := open(t, url, jetstream.Options{Bucket: bucket})
	rev, err := mine.Create(t.Context(), domain.ThisProcess("test", ""))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	// The other engine takes over, and this one hears nothing of it.
	taken, err := other.Update(t.Context(), domain.ThisProcess("test", ""), rev)
	if err != nil {
		t.Fatalf("take over: %v", err)
	}
	js, err := njs.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(t.Context(), bucket); err != nil {
		t.Fatalf("delete the bucket: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), eventWait)
	defer cancel()
	anew, err := mine.Create(ctx, domain.ThisProcess("test", ""))
	if err != nil {
		t.Fatalf("create in the bucket made anew: %v", err)
	}
	t.Logf("this engine's term %d, the other's unseen term %d, the term in the new bucket %d", rev, taken, anew)
	if anew <= taken {
		t.Fatalf("the bucket made anew handed out term %d, not above the other engine's term %d", anew, taken)
	}
	// The other engine finds the key taken in the new bucket.
	if _, err := other.Update(ctx, domain.ThisProcess("test", ""), taken); !errors.Is(err, domain.ErrLeaseConflict) {
		t.Fatalf("the other engine's renewal at %d in the new bucket: %v, want a conflict", taken, err)
	}
}

// An engine that starts after the bucket was deleted makes it anew in
// Open, not in a failed call: its first term goes on above the old
// bucket's all the same. Before, Open's bucket counted from 1 and handed
// out the term the first holder of the old bucket had served under.
func TestRealBrokerAnEngineThatStartsAfterADeleteGoesOnAboveTheOldTerms(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	const bucket = "STARTS_ANEW"
	old := open(t, url, jetstream.Options{Bucket: bucket})
	me := domain.ThisProcess("test", "")
	first, err := old.Create(t.Context(), me)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	last := first
	for range 5 {
		if last, err = old.Update(t.Context(), me, last); err != nil {
			t.Fatalf("renew: %v", err)
		}
	}
	js, err := njs.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(t.Context(), bucket); err != nil {
		t.Fatalf("delete the bucket: %v", err)
	}
	next := open(t, url, jetstream.Options{Bucket: bucket})
	anew, err := next.Create(t.Context(), me)
	if err != nil {
		t.Fatalf("create in the bucket Open made: %v", err)
	}
	t.Logf("old bucket: first term %d, last %d; the bucket Open made anew hands out %d", first, last, anew)
	if anew <= last {
		t.Fatalf("the bucket Open made anew handed out term %d, not above the old bucket's terms %d to %d", anew, first, last)
	}
}

// A bucket an operator makes by hand (nats kv add) counts from 1 too: the
// engine's first create in it goes on above the clock in microseconds, as
// in a bucket the engine makes anew. The stores' fence then never stands
// above the new terms.
func TestRealBrokerABucketMadeByHandStartsAboveTheClock(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	const bucket = "BY_HAND"
	js, err := njs.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(t.Context(), njs.KeyValueConfig{Bucket: bucket, History: 1}); err != nil {
		t.Fatalf("make the bucket by hand: %v", err)
	}
	before := uint64(time.Now().UnixMicro())
	l := open(t, url, jetstream.Options{Bucket: bucket})
	rev, err := l.Create(t.Context(), domain.ThisProcess("test", ""))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if rev < before {
		t.Fatalf("the first term in a bucket made by hand is %d, below the clock's %d microseconds", rev, before)
	}
	// A stream that held a message is not compacted again: the next
	// create after a delete of the key goes on from its revisions.
	if err := l.Delete(t.Context(), rev); err != nil {
		t.Fatalf("release: %v", err)
	}
	again, err := l.Create(t.Context(), domain.ThisProcess("test", ""))
	if err != nil {
		t.Fatalf("create after the release: %v", err)
	}
	if again != rev+2 {
		t.Fatalf("the create after a release got %d, want %d: the stream was compacted again", again, rev+2)
	}
}

// An engine user without the grant to purge its lease stream cannot start
// on a stream that never held a message: Open fails and names the grant,
// rather than hand out term 1 (as it did before, when the purge of a
// bucket made anew failed unseen under the documented permissions).
func TestOpenNamesThePurgeGrantAnEngineUserLacks(t *testing.T) {
	const grant = "$JS.API.STREAM.PURGE.KV_ABI_ENGINE"
	opts := natstest.DeployedOptions(t, "server.conf")
	removed := false
	for _, u := range opts.Users {
		if u.Username != "engine_a" || u.Permissions == nil || u.Permissions.Publish == nil {
			continue
		}
		allow := slices.DeleteFunc(slices.Clone(u.Permissions.Publish.Allow), func(s string) bool { return s == grant })
		removed = len(allow) < len(u.Permissions.Publish.Allow)
		perms := *u.Permissions
		publish := *perms.Publish
		publish.Allow = allow
		perms.Publish = &publish
		u.Permissions = &perms
	}
	if !removed {
		t.Fatalf("deploy/nats gives engine_a no %s to take away", grant)
	}
	d := &natstest.Deployed{Server: natstest.StartWith(t, opts)}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	_, err := jetstream.Open(ctx, d.Connect(t, "engine_a"), jetstream.Options{})
	if err == nil || !strings.Contains(err.Error(), grant) {
		t.Fatalf("Open without %s: %v, want an error naming it", grant, err)
	}
}

// On three replicas a create over a deleted key is refused only for a
// value: each round two handles race to create the key an instant after
// its deletion, and when neither wins, the stream's leader must hold a
// value (one create landed though its answer was lost, which the state
// machine reads out). Before, the create asked any replica whether the
// key was deleted; one that had not yet applied the deletion showed the
// value it removed, and both creates were refused as taken over a key
// with no value (a few rounds in a hundred), so a holder re-making a
// deleted key, or a contender taking it, failed for nothing.
func TestRealBrokerACreateOverADeletedKeyIsRefusedOnlyForAValue(t *testing.T) {
	url := natstest.URLs(natstest.StartCluster(t)...)
	bucket := bucketName(t)
	a := open(t, url, jetstream.Options{Bucket: bucket, Replicas: 3})
	b := open(t, url, jetstream.Options{Bucket: bucket, Replicas: 3})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	const rounds = 1000
	for round := range rounds {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, l := range []*jetstream.Lease{a, b} {
			wg.Go(func() { _, errs[i] = l.Create(ctx, domain.ThisProcess("test", "")) })
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, domain.ErrLeaseTaken):
				t.Fatalf("round %d: create: %v", round, err)
			}
		}
		rec, err := a.Read(ctx)
		if err != nil {
			t.Fatalf("round %d: read: %v", round, err)
		}
		if won == 0 && !rec.Present {
			t.Fatalf("round %d: both creates were refused as taken, but the leader holds no value (revision %d): %v", round, rec.Revision, errs[0])
		}
		if won > 1 {
			t.Fatalf("round %d: %d creates won", round, won)
		}
		if err := a.Delete(ctx, rec.Revision); err != nil {
			t.Fatalf("round %d: delete: %v", round, err)
		}
	}
}

// servesAgain waits up to wait for o to serve, looking at its state as it
// changes, and tells whether it did.
func servesAgain(o *domain.Ownership, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for !o.MayServe() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
