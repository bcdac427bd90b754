package jetstream

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
)

// deletedAtEachCheck is the lease's JetStream, which deletes the lease
// bucket, through a connection of its own, whenever the lease looks for
// its stream, as an operator who deletes it again and again would just
// before, and notes until when each look may run. Every answer is the
// broker's: only the moment of the deletes, which no real operator could
// hit, is the test's.
type deletedAtEachCheck struct {
	jetstream.JetStream
	ops    jetstream.JetStream
	bucket string

	mu        sync.Mutex
	deadlines []time.Time
}

func (j *deletedAtEachCheck) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	dl, _ := ctx.Deadline()
	j.mu.Lock()
	j.deadlines = append(j.deadlines, dl)
	j.mu.Unlock()
	_ = j.ops.DeleteKeyValue(context.WithoutCancel(ctx), j.bucket) // gone already, at most
	return j.JetStream.Stream(ctx, name)
}

// A lease call may run LeaseCallOverrun past its context's deadline, or
// past its start if that is later, and no more: the liveness probe counts
// on it. Advertise makes the bucket anew each time it finds it gone and
// tries again, and every look it makes for the bucket ends with that one
// overrun. Before, each look had an overrun of its own,
// so a bucket deleted again and again kept an Advertise past its deadline
// up to four overruns, and a holder on a short lease, its keeper
// turning, could be judged stalled.
func TestEveryLookForTheBucketOfOneAdvertiseEndsWithinOneOverrun(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	const bucket = "OVERRUN"
	l, err := Open(t.Context(), natstest.Connect(t, url), Options{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	ops, err := jetstream.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	js := &deletedAtEachCheck{JetStream: l.js, ops: ops, bucket: bucket}
	l.js = js
	// A context already past its deadline: every call to the broker on
	// it fails at once, and only the looks for the bucket run, within
	// the overrun from the call's start.
	ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel()
	began := time.Now()
	if _, err := l.Advertise(ctx, time.Second); err == nil {
		t.Fatal("Advertise on a context past its deadline succeeded")
	}
	js.mu.Lock()
	defer js.mu.Unlock()
	if len(js.deadlines) < 2 {
		t.Fatalf("Advertise looked for the bucket %d time(s); want it to make the bucket anew and look again", len(js.deadlines))
	}
	first := js.deadlines[0]
	if first.Before(began) || first.After(time.Now().Add(domain.LeaseCallOverrun)) {
		t.Fatalf("the first look may run until %v, not within %v of the call's start", first, domain.LeaseCallOverrun)
	}
	for i, dl := range js.deadlines[1:] {
		if dl.After(first) {
			t.Fatalf("look %d of %d may run %v past the first, which one overrun past the call's start ends", i+2, len(js.deadlines), dl.Sub(first))
		}
	}
}
