package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/fx"

	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
)

// An engine that stops without writing its release (here one that made
// the lease key anew after someone deleted it, and still holds it the
// lease it waits before serving on such a key) leaves its record to go
// silent, and the next engine waits out a lease before it takes over.
// The activity log says so. Before, it logged such a stop as "released",
// the event of a handover written, which a successor takes at once, next
// to the successor's entry saying it took over from a silent holder.
func TestAStopWhoseReleaseIsNotWrittenIsNotLoggedAsReleased(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	services := sharedDocuments(t)
	cfg := testConfig(t, url, "serve", "", services)
	// Long enough that the stop below reaches its release while the key
	// made anew is still held before serving, on a loaded machine too.
	cfg.NATS.Engine.LeaseSeconds = 5
	old, a := start(t, cfg)
	awaitHistory(t, old, 1)

	js, err := jetstream.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	bucket, err := js.KeyValue(t.Context(), "ABI_ENGINE")
	if err != nil {
		t.Fatal(err)
	}
	if err := bucket.Delete(t.Context(), "owner"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for old.Ownership().State() != domain.StateFenced {
		if time.Now().After(deadline) {
			t.Fatalf("the engine is %v, not fenced, after its lease key was deleted", old.Ownership().State())
		}
		time.Sleep(10 * time.Millisecond)
	}
	a.RequireStop()

	entry, err := bucket.Get(t.Context(), "owner")
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		InstanceID string `json:"instance_id"`
		Released   bool   `json:"released"`
	}
	if err := json.Unmarshal(entry.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.InstanceID != old.Me().InstanceID || rec.Released {
		t.Fatalf("the lease holds %+v after the stop, want the stopped engine's record, not released", rec)
	}

	next, b := start(t, testConfig(t, url, "serve", "", services))
	defer b.RequireStop()
	h := awaitHistory(t, next, 4) // acquired, fenced and the stop of the old one; took_over
	for _, e := range h {
		if e.InstanceID == old.Me().InstanceID && e.Event == app.EventReleased {
			t.Fatalf("the activity log says the old engine released the lease, which it left to go silent: %+v", h)
		}
	}
	find(t, h, old.Me().InstanceID, app.EventNotReleased)
	find(t, h, next.Me().InstanceID, app.EventTookOver)
}

// refusingModule fails its start, once the engine holds the lease.
type refusingModule struct{}

func (refusingModule) Name() string                               { return "refusing" }
func (refusingModule) Needs() []string                            { return nil }
func (refusingModule) Start(context.Context, app.ModuleEnv) error { return errors.New("refused") }
func (refusingModule) Stop(context.Context) error                 { return nil }

// The activity log starts before every other module, so a module whose
// start fails leaves the log with the engine's acquisition and release.
// Before, fx handed the engine its modules in an order of its own, drawn
// anew at each start, and half the time the log came after the failing
// module, never started, and kept nothing of an engine that had held the
// lease and served.
func TestTheActivityLogKeepsTheHoldOfAStartAModuleFailed(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	services := sharedDocuments(t)
	const starts = 8
	var failed []string
	for range starts {
		var e *app.Engine
		a := fx.New(app.Graph(options(testConfig(t, url, "serve", "", services)),
			app.AsModule(func() refusingModule { return refusingModule{} })), fx.Populate(&e), fx.NopLogger)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		err := a.Start(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "refused") {
			t.Fatalf("the start returned %v, want the module's refusal", err)
		}
		failed = append(failed, e.Me().InstanceID)
	}

	next, b := start(t, testConfig(t, url, "serve", "", services))
	defer b.RequireStop()
	h := awaitHistory(t, next, 1)
	for _, id := range failed {
		for _, event := range []string{app.EventAcquired, app.EventReleased} {
			if !slices.ContainsFunc(h, func(e app.ActivityEntry) bool { return e.InstanceID == id && e.Event == event }) {
				t.Fatalf("the activity log has no %s entry of engine %s, whose start a module failed: %+v", event, id, h)
			}
		}
	}
}
