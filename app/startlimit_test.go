package app_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/abi-engine/engine/adapters/secondary/lease/jetstream"
	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
)

// An engine on a lease of 1 s finds the record of a holder that renews by
// a lease of 34 s and died: it waits out the holder's lease, as a
// contender must, and takes over. Its start, bounded by its own lease and
// 30 s more, ended before that, and so did every start after it: the
// engine never served.
func TestAnEngineOnAShortLeaseTakesOverADeadHolderOfALongerOne(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a lease of 34 s")
	}
	url := natstest.StartServer(t).ClientURL()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	lease := openLease(ctx, t, url)
	const holders = 34 * time.Second
	if _, err := lease.Create(ctx, domain.Holder{InstanceID: domain.NewInstanceID(), Host: "dead", PID: 1, Lease: holders}); err != nil {
		t.Fatal(err)
	}
	serveNoSoonerThan(ctx, t, url, holders, "took over after %v, before the holder's lease of %v had passed")
}

// An engine on a lease of 1 s finds the lease key deleted, and the bucket
// keeping beside it the lease of 34 s of the engine that held it: it holds
// the key that long before it serves, and its start, bounded by its own
// lease and 30 s more, must not end first.
func TestAnEngineOnAShortLeaseServesAfterAKeyDeletedUnderAHolderOfALongerOne(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a lease of 34 s")
	}
	url := natstest.StartServer(t).ClientURL()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	lease := openLease(ctx, t, url)
	const holders = 34 * time.Second
	if _, err := lease.Advertise(ctx, holders); err != nil {
		t.Fatal(err)
	}
	rev, err := lease.Create(ctx, domain.Holder{InstanceID: domain.NewInstanceID(), Host: "gone", PID: 1, Lease: holders})
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Delete(ctx, rev); err != nil {
		t.Fatal(err)
	}
	serveNoSoonerThan(ctx, t, url, holders, "served after %v, before the lease of %v kept beside the deleted key had passed")
}

// openLease opens the lease bucket of the NATS server at url.
func openLease(ctx context.Context, t *testing.T, url string) *jetstream.Lease {
	t.Helper()
	lease, err := jetstream.Open(ctx, natstest.Connect(t, url), jetstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return lease
}

// serveNoSoonerThan starts a serving engine on the NATS server at url,
// stopped when the test ends, and fails the test unless its start took
// at least wait and ended with the engine serving; early is the failure's
// message, given the time the start took and wait.
func serveNoSoonerThan(ctx context.Context, t *testing.T, url string, wait time.Duration, early string) {
	t.Helper()
	var e *app.Engine
	a := fx.New(app.Graph(options(testConfig(t, url, "serve", "", memoryServices))), fx.Populate(&e), fx.NopLogger)
	if err := a.Err(); err != nil {
		t.Fatal(err)
	}
	begun := time.Now()
	if err := a.Start(ctx); err != nil {
		t.Fatalf("start after %v: %v", time.Since(begun).Round(time.Second), err)
	}
	t.Cleanup(func() { _ = a.Stop(context.Background()) })
	if took := time.Since(begun); took < wait {
		t.Fatalf(early, took, wait)
	}
	if !e.Ownership().MayServe() {
		t.Fatalf("the engine started but does not serve: %s", e.Ownership().State())
	}
}
