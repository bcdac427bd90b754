package jetstream_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/abi-engine/engine/adapters/secondary/lease/jetstream"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
)

// signalWriter closes found the first time a write holds want, and also
// holds also when that is set.
type signalWriter struct {
	want  []byte
	also  []byte
	once  sync.Once
	found chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, w.want) && bytes.Contains(p, w.also) {
		w.once.Do(func() { close(w.found) })
	}
	return len(p), nil
}

// keyHasNoValue fails unless the lease key, read from the stream leader,
// holds no value.
func keyHasNoValue(t *testing.T, l *jetstream.Lease, bucket string) {
	t.Helper()
	if rec, err := l.Read(t.Context()); err != nil || rec.Present {
		t.Fatalf("the key in the bucket %s reads %+v, %v; want no value", bucket, rec, err)
	}
}

// fencedNow returns once the engine is fenced, with every transition
// before it drained, so a later waitFor hears only what follows.
func (e *realEngine) fencedNow(t *testing.T) {
	t.Helper()
	if e.o.State() != domain.StateFenced {
		e.waitFor(t, domain.StateFenced)
	}
	for {
		select {
		case <-e.events:
		default:
			return
		}
	}
}

// serveOn has an engine on l, with a lease of two seconds and its log
// written to logger, claim the lease and serve.
func serveOn(t *testing.T, l *jetstream.Lease, logger *slog.Logger) (*domain.Ownership, *realEngine) {
	t.Helper()
	events := make(chan domain.Transition, 256)
	o, err := domain.NewOwnership(l, domain.ThisProcess("test", ""), domain.Timing{Lease: 2 * time.Second, StandbyTimeout: time.Minute},
		domain.WithObserver(func(tr domain.Transition) { events <- tr }), domain.WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = o.Release(t.Context()) })
	e := &realEngine{name: "engine", o: o, events: events}
	e.mustClaim(t, domain.OutcomeServe)
	return o, e
}

// serveThenDeleteBucket has an engine on l, with a lease of two seconds
// and its log written to log, claim the lease and serve; then it deletes
// the lease bucket by hand, as an operator would, through a connection of
// its own to url, which it returns with the engine.
func serveThenDeleteBucket(t *testing.T, url, bucket string, l *jetstream.Lease, log io.Writer) (*domain.Ownership, *realEngine, njs.JetStream) {
	t.Helper()
	o, e := serveOn(t, l, slog.New(slog.NewTextHandler(log, nil)))

	js, err := njs.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(t.Context(), bucket); err != nil {
		t.Fatalf("delete the bucket: %v", err)
	}
	return o, e, js
}

// serveThenGiveBucketTTL opens the lease bucket on url with its log
// written to log, has an engine with a lease of two seconds claim it and
// serve, then gives the bucket the TTL ttl in place, as an operator would,
// through a connection of its own. It returns the lease and the engine.
func serveThenGiveBucketTTL(t *testing.T, url, bucket string, log io.Writer, ttl time.Duration) (*jetstream.Lease, *domain.Ownership, *realEngine) {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(log, nil))
	l, err := jetstream.Open(t.Context(), natstest.Connect(t, url, nats.Name("engine")), jetstream.Options{Bucket: bucket, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	o, e := serveOn(t, l, logger)

	js, err := njs.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	cfg := njs.KeyValueConfig{Bucket: bucket, Description: "abi-engine ownership lease", History: 1, TTL: ttl}
	if _, err := js.UpdateKeyValue(t.Context(), cfg); err != nil {
		t.Fatalf("give the bucket a TTL in place: %v", err)
	}
	return l, o, e
}

// A lease bucket deleted and made anew by hand with a TTL while an engine
// holds the lease is refused when the engine finds its key with no value,
// naming the setting, and the engine writes no key into it: the server
// would drop the record between two renewals, and the engine, making the
// key again each time and holding it a lease before serving, never served.
// Once the TTL is removed, the engine makes the key again and serves.
func TestRealBrokerALeaseBucketMadeAnewWithATTLIsRefusedWhileTheEngineRuns(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	const bucket = "TTL_ANEW"
	log := &signalWriter{want: []byte("max_age"), found: make(chan struct{})}
	l, err := jetstream.Open(t.Context(), natstest.Connect(t, url, nats.Name("engine")), jetstream.Options{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	o, e, js := serveThenDeleteBucket(t, url, bucket, l, log)
	// Create or update: the engine may have made the bucket anew first.
	ttl := njs.KeyValueConfig{Bucket: bucket, History: 1, TTL: 200 * time.Millisecond}
	if _, err := js.CreateOrUpdateKeyValue(t.Context(), ttl); err != nil {
		t.Fatalf("make the bucket anew with a TTL: %v", err)
	}
	select {
	case <-log.found:
	case <-time.After(eventWait):
		t.Fatalf("within %v the engine logged nothing naming the bucket's max_age (now %s)", eventWait, o.State())
	}
	// After the refusal no renewal writes the key: it stays without a
	// value, and the engine fences.
	keyHasNoValue(t, l, "with a TTL")
	e.fencedNow(t) // half a lease after its last renewal

	ttl.TTL = 0
	if _, err := js.CreateOrUpdateKeyValue(t.Context(), ttl); err != nil {
		t.Fatalf("remove the TTL: %v", err)
	}
	e.waitFor(t, domain.StateServing)
	if rec, err := l.Read(t.Context()); err != nil || !rec.Present || rec.Holder.InstanceID != o.Me().InstanceID {
		t.Fatalf("the engine serves, and the key reads %+v, %v", rec, err)
	}
}

// A lease bucket deleted and made anew by hand on fewer replicas than a
// serving engine requires, while it holds the lease, is refused when the
// engine finds its key with no value, naming both counts, as Open refuses
// one: the engine writes no key into it, and fences. Before, it made the
// key again on one server, where that server's loss takes the record and
// every engine's fencing with it. Once the count is raised back, the
// engine makes the key again and serves.
func TestRealBrokerALeaseBucketMadeAnewOnFewerReplicasIsRefusedWhileTheEngineRuns(t *testing.T) {
	url := natstest.URLs(natstest.StartCluster(t)...)
	const bucket = "ONE_ANEW"
	log := &signalWriter{want: []byte("bucket_replicas is 3"), found: make(chan struct{})}
	l, err := jetstream.Open(t.Context(), natstest.Connect(t, url, nats.Name("engine")),
		jetstream.Options{Bucket: bucket, Replicas: 3, RequireReplicas: true})
	if err != nil {
		t.Fatal(err)
	}
	o, e, js := serveThenDeleteBucket(t, url, bucket, l, log)
	// Create or update: the engine may have made the bucket anew first.
	one := njs.KeyValueConfig{Bucket: bucket, History: 1, Replicas: 1}
	if _, err := js.CreateOrUpdateKeyValue(t.Context(), one); err != nil {
		t.Fatalf("make the bucket anew on one replica: %v", err)
	}
	// The engine may have made the key in its own bucket before the
	// update: an operator's delete of it leads to the check.
	kv, err := js.KeyValue(t.Context(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(t.Context(), jetstream.Key); err != nil {
		t.Fatalf("delete the key: %v", err)
	}
	select {
	case <-log.found:
	case <-time.After(eventWait):
		t.Fatalf("within %v the engine logged nothing naming the bucket's replica count (now %s)", eventWait, o.State())
	}
	keyHasNoValue(t, l, "on one replica")
	e.fencedNow(t)

	one.Replicas = 3
	if _, err := js.CreateOrUpdateKeyValue(t.Context(), one); err != nil {
		t.Fatalf("raise the replicas: %v", err)
	}
	e.waitFor(t, domain.StateServing)
	if rec, err := l.Read(t.Context()); err != nil || !rec.Present || rec.Holder.InstanceID != o.Me().InstanceID {
		t.Fatalf("the engine serves, and the key reads %+v, %v", rec, err)
	}
}

// A holder whose lease bucket is given, while it serves, a TTL shorter
// than the gap between its renewals fences as soon as the bucket is
// refused, under a reason that names the setting, and logs the refusal as
// an error: the server drops its record, the next renewal finds the key
// with no value, and nothing renews until an operator changes the
// setting. Before, it logged a warning about a failed renewal at every try
// and fenced half a lease after its last renewal, saying that no renewal
// had succeeded, which sends the operator to the link to NATS.
//
// The TTL is set in place, so the engine sees the bucket only without it
// or with it. Deleted and made anew, the bucket would be missing for a
// moment: a renewal then may make it anew itself, without the TTL, or wait
// for it past its fence, and the holder fences first for that.
func TestAHolderWhoseBucketIsRefusedFencesNamingTheSetting(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	const bucket = "TTL_FENCE"
	// The holder's refusal, not the lease's own reading of the settings
	// once a lease (TestAHolderLogsABucketTTLSetInPlace).
	log := &signalWriter{want: []byte("level=ERROR msg=\"the lease store refuses its settings"), also: []byte("max_age"), found: make(chan struct{})}
	// 200 ms: below the half second that lies between two renewals that
	// answer at once, so the server drops the record before the next one.
	_, o, e := serveThenGiveBucketTTL(t, url, bucket, log, 200*time.Millisecond)
	deadline := time.After(eventWait)
	for fenced := false; !fenced; {
		select {
		case tr := <-e.events:
			if tr.To != domain.StateFenced {
				continue
			}
			if !strings.Contains(tr.Reason, "max_age") {
				t.Fatalf("the engine fenced saying %q; want the reason to name the bucket's max_age", tr.Reason)
			}
			fenced = true
		case <-deadline:
			t.Fatalf("the engine did not fence within %v (now %s)", eventWait, o.State())
		}
	}
	select {
	case <-log.found:
	case <-time.After(eventWait):
		t.Fatalf("within %v the engine logged no error naming the bucket's max_age", eventWait)
	}
}

// A bucket TTL set in place, longer than any gap between two renewals
// that land, never drops the record of a holder that renews, so nothing that makes the key anew
// meets it; yet longest_lease expires, a standby is refused the lease at
// the next handover, and a crash leaves no engine able to serve. The
// holder logs it as an error naming the setting within a lease or so, and
// serves on. Before, nothing told of it until the handover failed.
func TestAHolderLogsABucketTTLSetInPlace(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	const bucket = "TTL_IN_PLACE"
	log := &signalWriter{want: []byte("level=ERROR"), also: []byte("max_age"), found: make(chan struct{})}
	// An hour: far above the renewal period, so the record never expires.
	l, o, _ := serveThenGiveBucketTTL(t, url, bucket, log, time.Hour)
	select {
	case <-log.found:
	case <-time.After(eventWait):
		t.Fatalf("within %v the holder logged no error naming the bucket's max_age", eventWait)
	}
	// The holder renews on: the key keeps its record.
	if rec, err := l.Read(t.Context()); err != nil || !rec.Present || rec.Holder.InstanceID != o.Me().InstanceID {
		t.Fatalf("the key reads %+v, %v; want the holder's record", rec, err)
	}
}

// A standby that finds the lease released, in a bucket given a TTL in
// place while it waited, takes nothing: taking it, on a lease longer than
// the holder's, raises the longest lease, which the bucket's setting
// refuses. It logs the refusal as an error naming the setting, since no
// engine serves until an operator changes it, and stays a standby; once
// the TTL is removed, it takes the lease and serves.
func TestAStandbyRefusedTheBucketsSettingLogsItAndTakesNothingUntilTheyChange(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	const bucket = "TTL_STANDBY"
	log := &signalWriter{want: []byte("level=ERROR msg=\"the lease store refuses its settings; the standby takes nothing"), also: []byte("max_age"), found: make(chan struct{})}
	// The standby opens the lease before the bucket has its TTL, which
	// Open would refuse.
	l, err := jetstream.Open(t.Context(), natstest.Connect(t, url, nats.Name("standby")), jetstream.Options{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	// The holder's lease is two seconds; the standby's three, so taking
	// over raises the longest lease.
	_, holder, _ := serveThenGiveBucketTTL(t, url, bucket, io.Discard, time.Hour)
	events := make(chan domain.Transition, 256)
	me := domain.ThisProcess("test", "v2")
	me.Host = "standby"
	o, err := domain.NewOwnership(l, me, domain.Timing{Lease: 3 * time.Second, StandbyTimeout: time.Minute},
		domain.WithObserver(func(tr domain.Transition) { events <- tr }), domain.WithLogger(slog.New(slog.NewTextHandler(log, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = o.Release(context.Background()) })
	standby := &realEngine{name: "standby", o: o, events: events}
	standby.mustClaim(t, domain.OutcomeStandby)
	done := standby.await(t)
	if err := holder.Release(t.Context()); err != nil {
		t.Fatalf("the holder's Release: %v", err)
	}
	select {
	case <-log.found:
	case err := <-done:
		t.Fatalf("the standby's AwaitLease returned %v, as %s, before it logged the refusal", err, o.State())
	case <-time.After(eventWait):
		t.Fatalf("within %v the standby logged no error naming the bucket's max_age (now %s)", eventWait, o.State())
	}
	if rec, err := l.Read(t.Context()); err != nil || !rec.Holder.Released || rec.Holder.InstanceID != holder.Me().InstanceID {
		t.Fatalf("after the refusal the key reads %+v, %v; want the holder's released record", rec, err)
	}
	if o.State() != domain.StateStandby {
		t.Fatalf("the standby is %s after the refusal; want standby", o.State())
	}

	js, err := njs.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	cfg := njs.KeyValueConfig{Bucket: bucket, Description: "abi-engine ownership lease", History: 1}
	if _, err := js.UpdateKeyValue(t.Context(), cfg); err != nil {
		t.Fatalf("remove the TTL: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the standby's AwaitLease once the TTL was removed: %v", err)
		}
	case <-time.After(eventWait):
		t.Fatalf("within %v of the TTL's removal the standby did not take the lease (now %s)", eventWait, o.State())
	}
	standby.waitFor(t, domain.StateServing)
}
