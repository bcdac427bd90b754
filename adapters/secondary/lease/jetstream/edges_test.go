package jetstream_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
			// a renewed first and holds the key it made anew.
			if !a.o.MayServe() {
				t.Fatalf("b was refused for a, but a may not serve (a is %s)", a.o.State())
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
	js, err := jetstream.New(natstest.Connect(t, url))
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
	js, err := jetstream.New(natstest.Connect(t, url))
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
