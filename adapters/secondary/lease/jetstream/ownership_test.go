package jetstream_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/abi-engine/engine/adapters/secondary/lease/jetstream"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/tcpproxy"
)

// The ownership state machine over a real nats-server, with a lease of one
// second. Waits are on transitions, with generous limits.

const (
	realLease = time.Second
	eventWait = 15 * time.Second
)

type realEngine struct {
	name    string
	o       *domain.Ownership
	nc      *nats.Conn
	events  chan domain.Transition
	renewed chan struct{} // a renewal succeeded
}

func startEngine(t *testing.T, url, bucket, name, rollout string) *realEngine {
	t.Helper()
	return startEngineOnLease(t, url, bucket, name, rollout, realLease)
}

// startEngineOnLease is startEngine with a lease of its own.
func startEngineOnLease(t *testing.T, url, bucket, name, rollout string, lease time.Duration) *realEngine {
	t.Helper()
	nc := natstest.Connect(t, url, nats.Name("engine-"+name))
	l, err := jetstream.Open(t.Context(), nc, jetstream.Options{Bucket: bucket})
	if err != nil {
		t.Fatalf("%s: open lease: %v", name, err)
	}
	e := &realEngine{name: name, nc: nc, events: make(chan domain.Transition, 256), renewed: make(chan struct{}, 1)}
	me := domain.ThisProcess("test", rollout)
	me.Host = name
	e.o, err = domain.NewOwnership(l, me, domain.Timing{Lease: lease, StandbyTimeout: time.Minute},
		domain.WithObserver(func(tr domain.Transition) { e.events <- tr }),
		domain.WithRenewalObserver(func(ok bool, _ time.Duration) {
			if ok {
				select {
				case e.renewed <- struct{}{}:
				default:
				}
			}
		}),
		domain.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.o.Release(context.Background()) })
	return e
}

// waitFor returns once the engine moves to state.
func (e *realEngine) waitFor(t *testing.T, state domain.State) {
	t.Helper()
	deadline := time.After(eventWait)
	for {
		select {
		case tr := <-e.events:
			if tr.To == state {
				return
			}
		case <-deadline:
			t.Fatalf("%s did not become %s within %v (now %s)", e.name, state, eventWait, e.o.State())
		}
	}
}

func (e *realEngine) claim(t *testing.T) (domain.Outcome, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), eventWait)
	defer cancel()
	return e.o.Claim(ctx, domain.RoleServe)
}

func (e *realEngine) mustClaim(t *testing.T, want domain.Outcome) {
	t.Helper()
	if got, err := e.claim(t); err != nil || got != want {
		t.Fatalf("%s: Claim = %v, %v; want %v", e.name, got, err, want)
	}
}

// await runs AwaitLease in the background.
func (e *realEngine) await(t *testing.T) <-chan error {
	out := make(chan error, 1)
	go func() { out <- e.o.AwaitLease(t.Context()) }()
	return out
}

func TestRealBrokerSecondEngineWithoutANewRolloutFails(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	a := startEngine(t, url, "SECOND", "web-1", "r7")
	a.mustClaim(t, domain.OutcomeServe)
	b := startEngine(t, url, "SECOND", "web-2", "r7")
	_, err := b.claim(t)
	if !errors.Is(err, domain.ErrAlreadyServing) {
		t.Fatalf("second engine: err %v, want ErrAlreadyServing", err)
	}
	for _, want := range []string{a.o.Me().InstanceID, "host web-1", "rollout r7"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not name %q", err, want)
		}
	}
	if !a.o.MayServe() {
		t.Fatalf("the first engine stopped serving")
	}
}

func TestRealBrokerStandbyTakesOverAtRelease(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	a := startEngine(t, url, "HANDOVER", "old", "v1")
	a.mustClaim(t, domain.OutcomeServe)
	b := startEngine(t, url, "HANDOVER", "new", "v2")
	b.mustClaim(t, domain.OutcomeStandby)
	done := b.await(t)
	time.Sleep(2 * realLease) // the standby keeps waiting while the holder renews
	if b.o.State() != domain.StateStandby {
		t.Fatalf("standby is %s while the holder renews", b.o.State())
	}
	released := time.Now()
	if err := a.o.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("AwaitLease: %v", err)
	}
	// Taking over by silence would take a whole lease; the release is seen
	// through the watch, in a round trip.
	if took := time.Since(released); took >= realLease {
		t.Fatalf("standby took %v after the release, no faster than waiting out the lease", took)
	}
	if !b.o.MayServe() || a.o.MayServe() {
		t.Fatalf("after the handover: old may serve %v, new may serve %v", a.o.MayServe(), b.o.MayServe())
	}
}

func TestRealBrokerDeadHolderIsTakenOverAfterOneLease(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	a := startEngine(t, url, "DEAD", "old", "")
	a.mustClaim(t, domain.OutcomeServe)
	a.nc.Close() // renewals stop, no release: a crash as the broker sees it
	died := time.Now()
	b := startEngine(t, url, "DEAD", "new", "")
	b.mustClaim(t, domain.OutcomeServe)
	// b saw a's last renewal no earlier than a quarter lease before the
	// crash, and waited a full lease after seeing it.
	if took := time.Since(died); took < realLease*3/4 {
		t.Fatalf("took over %v after the crash, before a lease of silence", took)
	}
	a.waitFor(t, domain.StateFenced)
}

func TestRealBrokerFencedHolderRestores(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	proxy := tcpproxy.Start(t, strings.TrimPrefix(url, "nats://"))
	a := startEngine(t, "nats://"+proxy.Addr(), "FENCE", "a", "")
	a.mustClaim(t, domain.OutcomeServe)
	proxy.Block()
	a.waitFor(t, domain.StateFenced)
	if a.o.MayServe() {
		t.Fatalf("a fenced engine may serve")
	}
	proxy.Unblock()
	a.waitFor(t, domain.StateServing)
	if !a.o.MayServe() {
		t.Fatalf("a restored engine may not serve")
	}
}

func TestRealBrokerFencedHolderThatFindsAnotherHolderIsLost(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	proxy := tcpproxy.Start(t, strings.TrimPrefix(url, "nats://"))
	a := startEngine(t, "nats://"+proxy.Addr(), "LOST", "old", "v1")
	a.mustClaim(t, domain.OutcomeServe)
	b := startEngine(t, url, "LOST", "new", "v2")
	b.mustClaim(t, domain.OutcomeStandby)
	done := b.await(t)
	proxy.Block()
	a.waitFor(t, domain.StateFenced)
	if err := <-done; err != nil {
		t.Fatalf("AwaitLease: %v", err)
	}
	if a.o.MayServe() {
		t.Fatalf("the old holder may serve while the new one does")
	}
	proxy.Unblock()
	a.waitFor(t, domain.StateLost)
	select {
	case <-a.o.Lost():
	default:
		t.Fatalf("Lost() not closed after the lease was lost")
	}
	if !b.o.MayServe() {
		t.Fatalf("the new holder stopped serving")
	}
}

// A holder on a lease of 12 s renews every 3 s and serves until 6 s
// without a renewal. A contender on a lease of 1 s, started just after a
// renewal, used to see a second of silence, take the lease and serve
// beside it; the holder's record says which lease it renews by, and the
// contender waits that long.
func TestRealBrokerAContenderWaitsForTheLeaseItsHolderRenewsBy(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	first := startEngine(t, url, "LONGER", "first", "")
	first.mustClaim(t, domain.OutcomeServe) // a lease on the new key, then a released record
	if err := first.o.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	a := startEngineOnLease(t, url, "LONGER", "a", "", 12*realLease)
	a.mustClaim(t, domain.OutcomeServe)
	select {
	case <-a.renewed:
	case <-time.After(eventWait):
		t.Fatalf("a did not renew within %v", eventWait)
	}
	b := startEngine(t, url, "LONGER", "b", "")
	out, err := b.claim(t)
	if !errors.Is(err, domain.ErrAlreadyServing) {
		t.Fatalf("b: Claim = %v, %v; want ErrAlreadyServing, naming a", out, err)
	}
	if !a.o.MayServe() {
		t.Fatalf("a stopped serving: %s", a.o.State())
	}
}

// An engine on a short lease that finds the key deleted, or purged, under
// a holder on a longer lease, and never saw that holder's record, waits
// the holder's lease before it serves: the holder wrote its lease beside
// the key before it took it, and neither a delete nor a purge of the key
// removes that. Before, the engine waited its own lease of one second and
// served beside the holder, which served on until its next renewal, two
// seconds after its last, found the engine's record.
func TestRealBrokerAnEngineThatNeverSawAHolderOfALongerLeaseWaitsItOutOverADeletedKey(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	nc := natstest.Connect(t, url)
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, purge := range []bool{false, true} {
		name := "Deleted"
		if purge {
			name = "Purged"
		}
		t.Run(name, func(t *testing.T) {
			bucket := "NEVERSAW" + strings.ToUpper(name)
			first := startEngine(t, url, bucket, "first", "")
			first.mustClaim(t, domain.OutcomeServe) // a lease on the new key, then a released record
			if err := first.o.Release(t.Context()); err != nil {
				t.Fatalf("Release: %v", err)
			}
			a := startEngineOnLease(t, url, bucket, "a", "", 8*realLease)
			a.mustClaim(t, domain.OutcomeServe)
			select {
			case <-a.renewed: // one from before, perhaps: the next is just after a renewal
			default:
			}
			select {
			case <-a.renewed:
			case <-time.After(eventWait):
				t.Fatalf("a did not renew within %v", eventWait)
			}
			// b is made, its bucket opened, before the key goes: it never
			// reads a's record.
			b := startEngine(t, url, bucket, "b", "")
			kv, err := js.KeyValue(t.Context(), bucket)
			if err != nil {
				t.Fatal(err)
			}
			// What `nats kv del` and `nats kv purge` send.
			if purge {
				err = kv.Purge(t.Context(), jetstream.Key)
			} else {
				err = kv.Delete(t.Context(), jetstream.Key)
			}
			if err != nil {
				t.Fatal(err)
			}
			b.mustClaim(t, domain.OutcomeServe)
			if a.o.MayServe() {
				t.Fatalf("b serves while a, which held the key before it went and renews by a lease of 8s, may still serve (a is %s)", a.o.State())
			}
			a.waitFor(t, domain.StateLost)
		})
	}
}
