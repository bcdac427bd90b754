package app_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
)

// sharedDocuments keeps documents in one SQLite file that every engine of
// a test opens, as engines on shared backends reach one database.
func sharedDocuments(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf(`
services:
  keyvalue: {adapter: memory}
  document: {adapter: sqlite, config: {path: %q}}
  object_storage: {adapter: memory}
  vector_store: {adapter: memory}
  cache: {adapter: memory}
  secret: {adapter: env}
`, filepath.Join(t.TempDir(), "documents.sqlite"))
}

// awaitHistory reads the activity log through e until it has n entries.
func awaitHistory(t *testing.T, e *app.Engine, n int) []app.ActivityEntry {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		h, err := app.History(ctx, e.Services().Document, 100)
		cancel()
		if err == nil && len(h) >= n {
			checkNewestFirst(t, h)
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("the activity log has %d entries (%v), want %d: %+v", len(h), err, n, h)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func checkNewestFirst(t *testing.T, h []app.ActivityEntry) {
	t.Helper()
	var last time.Time
	for i, e := range h {
		at, err := time.Parse(time.RFC3339Nano, e.Time)
		if err != nil {
			t.Fatalf("entry %d time %q: %v", i, e.Time, err)
		}
		if i > 0 && at.After(last) {
			t.Fatalf("entry %d (%s) is newer than the one before it: %+v", i, e.Time, h)
		}
		last = at
	}
}

// find returns the entry of instance with the event.
func find(t *testing.T, h []app.ActivityEntry, instance, event string) app.ActivityEntry {
	t.Helper()
	i := slices.IndexFunc(h, func(e app.ActivityEntry) bool { return e.InstanceID == instance && e.Event == event })
	if i < 0 {
		t.Fatalf("no %s entry of %s in %+v", event, instance, h)
	}
	return h[i]
}

func TestTheActivityLogKeepsAcquiredAndReleased(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	services := sharedDocuments(t)
	first, a := start(t, testConfig(t, url, "serve", "", services))
	awaitHistory(t, first, 1)
	a.RequireStop()

	second, b := start(t, testConfig(t, url, "serve", "", services))
	defer b.RequireStop()
	// A machine too busy for an engine to renew in time adds a fence and
	// its end to the log (fenced, restored): only the acquisitions and the
	// release are this test's.
	var all, h []app.ActivityEntry
	for n := 3; ; n = len(all) + 1 {
		all = awaitHistory(t, second, n)
		h = slices.DeleteFunc(slices.Clone(all), func(e app.ActivityEntry) bool {
			return e.Event != app.EventAcquired && e.Event != app.EventReleased
		})
		if len(h) >= 3 {
			break
		}
	}
	if len(h) != 3 {
		t.Fatalf("history: %+v", all)
	}
	want := []string{second.Me().InstanceID + " acquired", first.Me().InstanceID + " released", first.Me().InstanceID + " acquired"}
	for i, e := range h {
		if got := e.InstanceID + " " + e.Event; got != want[i] {
			t.Fatalf("entry %d is %q, want %q: %+v", i, got, want[i], h)
		}
	}
	me := first.Me()
	e := find(t, h, me.InstanceID, app.EventAcquired)
	if e.Host != me.Host || e.PID != me.PID || e.Version != "test" || e.Revision == 0 || e.Detail == "" {
		t.Fatalf("acquired entry %+v for %+v", e, me)
	}
	if last, err := app.History(t.Context(), second.Services().Document, 1); err != nil || len(last) != 1 || last[0] != all[0] {
		t.Fatalf("History with limit 1: %+v, %v", last, err)
	}
}

func TestAHandoverIsLogged(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	services := sharedDocuments(t)
	old, a := start(t, testConfig(t, url, "serve", "", services))
	cfg := testConfig(t, url, "serve", "", services)
	cfg.NATS.Engine.HotStandby = true
	next, b := start(t, cfg)
	defer b.RequireStop()
	if next.Outcome() != domain.OutcomeStandby {
		t.Fatalf("the second engine is %v, want a standby", next.Outcome())
	}
	awaitHistory(t, next, 2) // acquired, then standby_started through the old engine
	a.RequireStop()

	h := awaitHistory(t, next, 4)
	took := find(t, h, next.Me().InstanceID, app.EventTookOver)
	if !strings.Contains(took.Detail, old.Me().InstanceID) {
		t.Fatalf("took_over %q does not name the old engine %s", took.Detail, old.Me().InstanceID)
	}
	find(t, h, next.Me().InstanceID, app.EventStandbyStarted)
	find(t, h, old.Me().InstanceID, app.EventReleased)
	find(t, h, old.Me().InstanceID, app.EventAcquired)
}

// An engine of role auto that finds another holding the lease is a client
// (as every CLI command is next to a serving engine), yet its stop moved
// its ownership to released, which the log took for a standby that
// stopped before it served. With no store of its own it wrote that entry
// through the document service, which refuses callers' writes to the log:
// every such client that stopped logged a warning, and one that found no
// engine answering (the holder still waiting out its first lease) held up
// its stop for seconds.
func TestAClientEngineWritesNothingToTheActivityLog(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	services := sharedDocuments(t)
	first, a := start(t, testConfig(t, url, "serve", "", services))
	defer a.RequireStop()
	awaitHistory(t, first, 1)

	client, _, logs, b := startLogged(t, testConfig(t, url, "auto", "", services))
	if client.Outcome() != domain.OutcomeClient {
		t.Fatalf("the second engine is %v, want a client", client.Outcome())
	}
	b.RequireStop()
	if text := logs.String(); strings.Contains(text, "activity log entry not written") {
		t.Fatalf("a client's stop tried to write the activity log:\n%s", text)
	}
	for _, e := range awaitHistory(t, first, 1) {
		if e.InstanceID == client.Me().InstanceID {
			t.Fatalf("the activity log has an entry of a client: %+v", e)
		}
	}
}
