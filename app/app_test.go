package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
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
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/adapters/secondary/natsserver"
	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/app/config"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/testenv"
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
	yaml := fmt.Sprintf("nats:\n  url: %s\n  engine: {role: %s, rollout_id: %q, lease_seconds: 1, drain_seconds: 1}\nhttp: {listen: \"127.0.0.1:0\"}\ndata_dir: %s\n%s",
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

// A program's modules are fx options of any kind (enginecmd.Options), and
// fx runs the invokes of an fx.Module before those of the graph around it.
// The shared-backend check must still come first: a refused rollout runs
// none of a program's code, which may open its own files and connections,
// just as it opens none of the engine's.
func TestARefusedRolloutRunsNoInvokeOfAProgramsModule(t *testing.T) {
	s := natstest.StartServer(t)
	cfg := testConfig(t, s.ClientURL(), "serve", "r7", "")
	ran := false
	team := fx.Module("team", fx.Invoke(func(*app.Engine) { ran = true }))
	err := fx.New(app.Graph(options(cfg), team), fx.NopLogger).Err()
	if !errors.Is(err, storagepolicy.ErrLocalBackends) {
		t.Fatalf("fx.New error %v, want ErrLocalBackends", err)
	}
	if ran {
		t.Fatalf("the invoke of a program's fx.Module ran before the rollout was refused")
	}
	assertNothingOpened(t, s, cfg.DataDir)
}

// The refusal of a rollout on local backends must say where the rollout id
// came from, as every other configuration error does: an ABI_ROLLOUT_ID
// left exported in a shell refuses even `engine kv get`, and an operator
// who reads only `rollout "r7" needs shared backends` cannot tell which of
// the file and the environment to change.
func TestARefusedRolloutNamesWhereItsIDCameFrom(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		env        map[string]string
		want       string
	}{
		{"FromTheEnvironment", "data_dir: DIR\n", map[string]string{config.EnvRolloutID: "r7"},
			`engine.yaml: nats.engine.rollout_id (from ABI_ROLLOUT_ID): rollout "r7" needs shared backends, but keyvalue keeps its data in SQLite at `},
		{"FromTheFile", "data_dir: DIR\nnats:\n  engine:\n    rollout_id: r7\n", nil,
			`engine.yaml line 4: nats.engine.rollout_id: rollout "r7" needs shared backends, but keyvalue keeps its data in SQLite at `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			cfg, err := config.Parse("engine.yaml", []byte(strings.ReplaceAll(tc.file, "DIR", dir)), func(k string) string { return tc.env[k] })
			if err != nil {
				t.Fatalf("config: %v", err)
			}
			built, err := app.BuildStorage(cfg)
			if err != nil {
				t.Fatalf("BuildStorage: %v", err)
			}
			err = app.CheckStorage(cfg, built)
			if !errors.Is(err, storagepolicy.ErrLocalBackends) || !errors.Is(err, domain.ErrInvalidConfig) {
				t.Fatalf("CheckStorage: %v, want an invalid configuration that matches ErrLocalBackends", err)
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("CheckStorage:\n got %s\nwant it to begin %s", err, tc.want)
			}
		})
	}
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

// recorder is a module that writes through the keyvalue service it needs
// and registers a job.
type recorder struct {
	needs   []string
	started chan app.Services
	stopped chan struct{}
	ran     chan struct{}
}

func (r *recorder) Name() string    { return "recorder" }
func (r *recorder) Needs() []string { return r.needs }
func (r *recorder) Start(ctx context.Context, env app.ModuleEnv) error {
	if err := env.Jobs.Register(app.Job{Name: "tick", Every: 10 * time.Millisecond, Run: func(context.Context) error {
		select {
		case r.ran <- struct{}{}:
		default:
		}
		return nil
	}}); err != nil {
		return err
	}
	r.started <- env.Services
	return nil
}
func (r *recorder) Stop(context.Context) error { close(r.stopped); return nil }

func newRecorder(needs ...string) *recorder {
	return &recorder{needs: needs, started: make(chan app.Services, 1), stopped: make(chan struct{}), ran: make(chan struct{}, 1)}
}

func TestModulesGetFacadesAndJobsRunWhileServing(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	r := newRecorder("keyvalue", "document")
	var e *app.Engine
	a := fxtest.New(t, app.Graph(options(testConfig(t, url, "serve", "", memoryServices)),
		app.AsModule(func() *recorder { return r })), fx.Populate(&e))
	a.RequireStart()
	svc := <-r.started
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := svc.KeyValue.Set(ctx, "m", []byte("v"), 0); err != nil {
		t.Fatalf("a module's call: %v", err)
	}
	select {
	case <-r.ran:
	case <-time.After(10 * time.Second):
		t.Fatalf("the module's job never ran on a serving engine")
	}
	if !slicesContains(e.Jobs().Names(), "tick") {
		t.Fatalf("jobs %v lack the module's", e.Jobs().Names())
	}
	a.RequireStop()
	select {
	case <-r.stopped:
	default:
		t.Fatalf("the module was not stopped")
	}
}

func TestAModuleNeedingASwitchedOffServiceStopsTheStart(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	services := strings.Replace(memoryServices, "vector_store: {adapter: memory}", "vector_store: {adapter: off}", 1)
	r := newRecorder("vector_store")
	a := fx.New(app.Graph(options(testConfig(t, url, "serve", "", services)),
		app.AsModule(func() *recorder { return r })), fx.NopLogger)
	err := a.Start(t.Context())
	if err == nil || !strings.Contains(err.Error(), "needs the vector_store service, which is switched off") {
		t.Fatalf("Start error %v, want one naming the switched-off service", err)
	}
}

func TestSweepJobsForStoresThatKeepExpiredEntries(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	services := strings.Replace(memoryServices, "keyvalue: {adapter: memory}", "keyvalue: {adapter: sqlite}", 1)
	e, a := start(t, testConfig(t, url, "serve", "", services))
	defer a.RequireStop()
	if !slicesContains(e.Jobs().Names(), "sweep-expired-keyvalue") {
		t.Fatalf("jobs %v lack the keyvalue sweep", e.Jobs().Names())
	}
}

// The memory stores drop an expired entry when a call meets it; the sweep
// drops the ones written with a TTL and never met again, which would stay
// for the life of the process.
func TestTheMemoryStoresAreSwept(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	e, a := start(t, testConfig(t, url, "serve", "", memoryServices))
	defer a.RequireStop()
	for _, job := range []string{"sweep-expired-keyvalue", "sweep-expired-cache"} {
		if !slicesContains(e.Jobs().Names(), job) {
			t.Errorf("jobs %v lack %s", e.Jobs().Names(), job)
		}
	}
}

// The cache's object_storage tier keeps expired entries in the object
// store; over one that deletes on condition of an ETag it is swept too.
func TestTheObjectStorageCacheTierIsSwept(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	services := strings.Replace(memoryServices, "cache: {adapter: memory}", "cache: {adapter: object_storage}", 1)
	e, a := start(t, testConfig(t, url, "serve", "", services))
	defer a.RequireStop()
	if !slicesContains(e.Jobs().Names(), "sweep-expired-cache") {
		t.Fatalf("jobs %v lack the cache sweep", e.Jobs().Names())
	}
}

// Files under one directory keep what a Put cut short leaves; the serving
// engine sweeps them, so the temporary file of another engine's Put killed
// after this one opened the directory does not stay for as long as it runs.
func TestTheLocalObjectFilesAreSwept(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	services := strings.Replace(memoryServices, "object_storage: {adapter: memory}", "object_storage: {adapter: localfs}", 1)
	e, a := start(t, testConfig(t, url, "serve", "", services))
	defer a.RequireStop()
	if !slicesContains(e.Jobs().Names(), "sweep-expired-object_storage") {
		t.Fatalf("jobs %v lack the object storage sweep", e.Jobs().Names())
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// An interrupt that comes before the engine's start has begun ends that
// start as surely as one that comes during it. The command's signal
// handler is in place before fx starts, and fx runs the hook that binds
// the HTTP port before the engine's: a Ctrl-C in that moment reaches
// Interrupt before Start. Before, such an interrupt was dropped, and the
// engine went on to claim the lease, holding a new key a whole lease
// before serving, or watching a silent holder for one, while the operator
// waited for a process that had been told to stop.
func TestAnInterruptBeforeTheStartEndsTheStart(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	var e *app.Engine
	a := fx.New(app.Graph(options(testConfig(t, url, "serve", "", memoryServices))), fx.Populate(&e), fx.NopLogger)
	if err := a.Err(); err != nil {
		t.Fatal(err)
	}
	e.Interrupt()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := a.Start(ctx); err == nil {
		_ = a.Stop(ctx)
		t.Fatalf("the start ran to its end (outcome %v) after an interrupt that came before it", e.Outcome())
	} else if !errors.Is(err, context.Canceled) {
		t.Fatalf("Start = %v, want it ended by the interrupt", err)
	}
	lease, err := jetstream.Open(ctx, natstest.Connect(t, url), jetstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := lease.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Present && rec.Holder.InstanceID == e.Me().InstanceID && !rec.Holder.Released {
		t.Fatalf("an interrupted start left the lease held by the engine: %+v", rec)
	}
}

// With callers signing and the secret service switched off, a module that
// needs secrets is told that the service is switched off: telling it that
// secrets need nats.caller_secret would send the operator to set a key
// that is set already.
func TestAModuleNeedingSwitchedOffSecretsIsToldTheyAreOffWhenCallersSign(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	services := strings.Replace(memoryServices, "secret: {adapter: env}", "secret: {adapter: off}", 1)
	cfg := testConfig(t, url, "serve", "", services)
	cfg.NATS.CallerSecret = strings.Repeat("s", config.MinCallerSecret)
	cfg.HTTP.Token = "http-token"
	r := newRecorder("secret")
	a := fx.New(app.Graph(options(cfg), app.AsModule(func() *recorder { return r })), fx.NopLogger)
	err := a.Start(t.Context())
	if err == nil || !strings.Contains(err.Error(), "needs the secret service, which is switched off") {
		t.Fatalf("Start error %v, want one saying the secret service is switched off", err)
	}
}

// An engine of role client on embedded defaults (no configuration, and
// ABI_ENGINE_ROLE=client) runs no broker of its own when none answers: it
// fails, naming the address. Before, it started one: a serving engine
// started next on this host took that broker for the account's, and lost
// it, and stopped, when the client exited.
func TestAClientEngineRunsNoBrokerOfItsOwn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	o := options(testConfig(t, url, "client", "", memoryServices))
	o.Embed = true
	a := app.New(o)
	if err := a.Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err = a.Start(ctx)
	if err == nil {
		defer func() { _ = a.Stop(context.Background()) }()
	}
	if natsserver.Answers(url, time.Second) {
		t.Fatalf("a client engine on embedded defaults runs a broker at %s (start: %v)", url, err)
	}
	if err == nil || !strings.Contains(err.Error(), "no NATS server answers at "+url) {
		t.Fatalf("a client engine with no broker to reach started: %v, want an error naming %s", err, url)
	}
}

// A serving engine on embedded defaults runs the broker in its process and
// answers callers that reach it over TCP; its own connections reach that
// broker through memory, so a call and its answer cross no socket on the
// engine's side. The broker's TCP clients are counted from the kernel's
// table of sockets: the test's caller is the only one.
func TestAServingEngineReachesItsEmbeddedBrokerThroughMemory(t *testing.T) {
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		testenv.Missing(t, "this test counts the broker's TCP clients in /proc/net/tcp, which this system lacks: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + ln.Addr().String()
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	o := options(testConfig(t, url, "serve", "", memoryServices))
	o.Embed = true
	a := app.New(o)
	if err := a.Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Stop(context.Background()) }()

	kv := natsclient.NewKeyValue(natsclient.New(natstest.Connect(t, url)))
	if err := kv.Set(ctx, "k", []byte("v"), 0); err != nil {
		t.Fatalf("a set through the embedded broker: %v", err)
	}
	if got, err := kv.Get(ctx, "k"); err != nil || string(got) != "v" {
		t.Fatalf("a get through the embedded broker answered %q, %v", got, err)
	}
	if n := tcpClients(t, port); n != 1 {
		t.Fatalf("the embedded broker has %d TCP clients, want 1 (the test's caller): the engine reaches its own broker through sockets", n)
	}
}

// tcpClients counts the established IPv4 connections whose local port is
// port: on a listener's host, its accepted clients.
func tcpClients(t *testing.T, port int) int {
	t.Helper()
	table, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	local := fmt.Sprintf(":%04X", port)
	n := 0
	for _, line := range strings.Split(string(table), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && strings.HasSuffix(f[1], local) && f[3] == "01" {
			n++
		}
	}
	return n
}
