package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/abi-engine/engine/adapters/secondary/lease/jetstream"
	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/app/config"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/storagepolicy"
)

// memoryServices keeps every service in the process, so tests of the
// lifecycle need no database.
const memoryServices = `
services:
  keyvalue: {adapter: memory}
  document: {adapter: memory}
  object_storage: {adapter: memory}
  vector_store: {adapter: memory}
  cache: {adapter: memory}
  secret: {adapter: env}
`

func testConfig(t *testing.T, url, role, rollout, services string) *config.Config {
	t.Helper()
	dir := t.TempDir()
	yaml := fmt.Sprintf("nats:\n  url: %s\n  engine: {role: %s, rollout_id: %q, lease_seconds: 1, drain_seconds: 1}\ndata_dir: %s\n%s",
		url, role, rollout, filepath.Join(dir, "data"), services)
	cfg, err := config.Parse("test.yaml", []byte(yaml), func(string) string { return "" })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

func options(cfg *config.Config) app.Options {
	return app.Options{Config: cfg, Version: "test", Logger: slog.New(slog.DiscardHandler)}
}

func TestTheGraphIsValidForEveryRole(t *testing.T) {
	for _, role := range []string{"serve", "client", "auto"} {
		cfg := testConfig(t, "nats://127.0.0.1:1", role, "", memoryServices)
		if err := fx.ValidateApp(app.Graph(options(cfg))); err != nil {
			t.Errorf("%s: %v", role, err)
		}
	}
}

// start runs an engine's graph under fxtest and returns the engine.
func start(t *testing.T, cfg *config.Config) (*app.Engine, *fxtest.App) {
	t.Helper()
	var e *app.Engine
	a := fxtest.New(t, app.Graph(options(cfg)), fx.Populate(&e), fx.StartTimeout(30*time.Second))
	a.RequireStart()
	return e, a
}

func TestEachRoleStartsAndStops(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	served, a := start(t, testConfig(t, url, "serve", "", memoryServices))
	if served.Outcome() != domain.OutcomeServe || !served.Ready() {
		t.Fatalf("serve: outcome %v, ready %v", served.Outcome(), served.Ready())
	}
	if served.Services().KeyValue == nil {
		t.Fatalf("serve: no keyvalue service for the modules")
	}

	for _, role := range []string{"client", "auto"} {
		e, b := start(t, testConfig(t, url, role, "", memoryServices))
		if e.Outcome() != domain.OutcomeClient || !e.Ready() {
			t.Fatalf("%s next to a serving engine: outcome %v, ready %v", role, e.Outcome(), e.Ready())
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		if err := e.Services().KeyValue.Set(ctx, "from-"+role, []byte("v"), 0); err != nil {
			t.Fatalf("%s: a call through the serving engine: %v", role, err)
		}
		cancel()
		b.RequireStop()
	}
	a.RequireStop()
	if served.Ready() {
		t.Fatalf("a stopped engine is ready")
	}
}

func TestARolloutWithLocalBackendsIsRefusedBeforeAnythingOpens(t *testing.T) {
	s := natstest.StartServer(t)
	cfg := testConfig(t, s.ClientURL(), "serve", "r7", "")
	a := fx.New(app.Graph(options(cfg)), fx.NopLogger)
	err := a.Err()
	if !errors.Is(err, storagepolicy.ErrLocalBackends) {
		t.Fatalf("fx.New error %v, want ErrLocalBackends", err)
	}
	for _, want := range []string{`rollout "r7" needs shared backends`, "keyvalue keeps its data in SQLite at"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	assertNothingOpened(t, s, cfg.DataDir)
}

// assertNothingOpened checks that no file was made under dir, no client
// ever connected to the broker, and the lease bucket does not exist.
func assertNothingOpened(t *testing.T, s *server.Server, dir string) {
	t.Helper()
	if err := filepath.WalkDir(filepath.Dir(dir), func(p string, d fs.DirEntry, err error) error {
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if d != nil && !d.IsDir() {
			t.Errorf("a refused engine created %s", p)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	connz, err := s.Connz(&server.ConnzOptions{State: server.ConnAll})
	if err != nil {
		t.Fatal(err)
	}
	if connz.Total != 0 {
		t.Errorf("a refused engine opened %d NATS connections", connz.Total)
	}
	js, err := natstest.Connect(t, s.ClientURL()).JetStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.KeyValue(jetstream.DefaultBucket); err == nil {
		t.Errorf("a refused engine created the %s bucket", jetstream.DefaultBucket)
	}
}

func TestEveryTransitionIsPublished(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	nc := natstest.Connect(t, url)
	events := make(chan wire.EngineEvent, 16)
	sub, err := nc.Subscribe(wire.EventsSubject, func(m *nats.Msg) {
		var ev wire.EngineEvent
		if err := json.Unmarshal(m.Data, &ev); err == nil {
			events <- ev
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	e, a := start(t, testConfig(t, url, "serve", "", memoryServices))
	a.RequireStop()
	want := []string{"idle->serving", "serving->released"}
	for _, w := range want {
		select {
		case ev := <-events:
			if got := ev.From + "->" + ev.To; got != w || ev.InstanceID != e.Me().InstanceID {
				t.Fatalf("event %+v, want %s from %s", ev, w, e.Me().InstanceID)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s event", w)
		}
	}
}
