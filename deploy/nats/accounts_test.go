// Package nats_test runs engines on deploy/nats's nats-server configuration,
// as it is shipped: two accounts, an engine user and a least-privilege
// caller in each.
package nats_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/app/config"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/enginecmd"
	"github.com/abi-engine/engine/internal/logbuf"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// engineFile writes an engine.yaml for the server at url with the given
// credentials block, and returns its path.
func engineFile(t *testing.T, url, credentials, engine string) string {
	t.Helper()
	dir := t.TempDir()
	src := fmt.Sprintf(`nats:
  url: %q
  credentials: %s
  engine: {lease_seconds: 1, drain_seconds: 1, %s}
http: {listen: "off"}
data_dir: %q
services:
  keyvalue: {adapter: memory}
  document: {adapter: memory}
  object_storage: {adapter: memory}
  vector_store: {adapter: memory}
  cache: {adapter: memory}
`, url, credentials, engine, filepath.Join(dir, "data"))
	path := filepath.Join(dir, "engine.yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// userFile is engineFile for a deployed user and its password.
func userFile(t *testing.T, d *natstest.Deployed, user, engine string) string {
	t.Helper()
	return engineFile(t, d.Server.ClientURL(), fmt.Sprintf("{user: %s, password: %q}", user, natstest.Password(user)), engine)
}

// running is an engine in the test process.
type running struct {
	*app.Engine
	app  *fxtest.App
	logs *logbuf.Buffer
}

// newEngine builds an engine from a configuration file; start it with
// app.Start.
func newEngine(t *testing.T, path string) *running {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	r := &running{logs: &logbuf.Buffer{}}
	log := slog.New(slog.NewTextHandler(r.logs, nil))
	r.app = fxtest.New(t, app.Graph(app.Options{Config: cfg, Version: "test", Logger: log}),
		fx.Populate(&r.Engine), fx.StartTimeout(30*time.Second), fx.StopTimeout(30*time.Second))
	return r
}

// startEngine starts an engine and stops it when the test ends.
func startEngine(t *testing.T, path string) *running {
	t.Helper()
	r := newEngine(t, path)
	r.app.RequireStart()
	t.Cleanup(func() { r.app.RequireStop(); r.noRefusals(t) })
	return r
}

// noRefusals fails the test if the broker refused the engine anything: the
// engine user's permissions must cover all it does.
func (r *running) noRefusals(t *testing.T) {
	t.Helper()
	if logs := r.logs.String(); strings.Contains(logs, "refused an operation") || strings.Contains(strings.ToLower(logs), "permissions violation") {
		t.Errorf("the broker refused engine %s something:\n%s", r.Me().InstanceID, logs)
	}
}

func statusOf(t *testing.T, path string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := enginecmd.Run([]string{"status", "--config", path}, &stdout, &stderr, enginecmd.Options{}); code != 0 {
		t.Fatalf("engine status = %d: %s", code, stderr.String())
	}
	return stdout.String()
}

func TestEachAccountHasItsOwnServingEngine(t *testing.T) {
	d := natstest.StartDeployed(t)
	pathA, pathB := userFile(t, d, "engine_a", "role: serve"), userFile(t, d, "engine_b", "role: serve")
	a, b := startEngine(t, pathA), startEngine(t, pathB)
	if a.Outcome() != domain.OutcomeServe || b.Outcome() != domain.OutcomeServe {
		t.Fatalf("outcomes: A %v, B %v; want both to serve", a.Outcome(), b.Outcome())
	}

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	kvA := natsclient.NewKeyValue(natsclient.New(d.Connect(t, "caller_a")))
	kvB := natsclient.NewKeyValue(natsclient.New(d.Connect(t, "caller_b")))
	if err := kvA.Set(ctx, "greeting", []byte("from A"), 0); err != nil {
		t.Fatalf("set through A's caller: %v", err)
	}
	if v, err := kvB.Get(ctx, "greeting"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("B reads A's key: %q, %v", v, err)
	}
	if v, err := kvA.Get(ctx, "greeting"); err != nil || string(v) != "from A" {
		t.Fatalf("A reads its own key: %q, %v", v, err)
	}

	second := newEngine(t, userFile(t, d, "engine_a", "role: serve"))
	err := second.app.Start(ctx)
	if err == nil {
		second.app.RequireStop()
		t.Fatalf("a second serving engine in account TEAM_A started")
	}
	if !strings.Contains(err.Error(), a.Me().InstanceID) || strings.Contains(err.Error(), b.Me().InstanceID) {
		t.Fatalf("the second engine's error %q does not name A's holder %s alone", err, a.Me().InstanceID)
	}
	if b.Ownership().State() != domain.StateServing || b.Ownership().Record().Holder.InstanceID != b.Me().InstanceID {
		t.Fatalf("B's engine is %v with holder %+v after A's refusal", b.Ownership().State(), b.Ownership().Record().Holder)
	}

	stA, stB := statusOf(t, pathA), statusOf(t, pathB)
	if !strings.Contains(stA, "engine "+a.Me().InstanceID+" serves") || strings.Contains(stA, b.Me().InstanceID) {
		t.Errorf("engine status in TEAM_A:\n%s\nwant %s alone", stA, a.Me().InstanceID)
	}
	if !strings.Contains(stB, "engine "+b.Me().InstanceID+" serves") || strings.Contains(stB, a.Me().InstanceID) {
		t.Errorf("engine status in TEAM_B:\n%s\nwant %s alone", stB, b.Me().InstanceID)
	}
}

// refusals records what the broker refuses a connection.
type refusals struct {
	mu   sync.Mutex
	errs []string
	seen chan struct{}
}

func newRefusals() *refusals { return &refusals{seen: make(chan struct{}, 64)} }

func (r *refusals) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err.Error())
	r.mu.Unlock()
	r.seen <- struct{}{}
}

// await waits until the broker refused something naming want.
func (r *refusals) await(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		r.mu.Lock()
		for _, e := range r.errs {
			if strings.Contains(e, "Permissions Violation") && strings.Contains(e, want) {
				r.mu.Unlock()
				return
			}
		}
		got := append([]string(nil), r.errs...)
		r.mu.Unlock()
		select {
		case <-r.seen:
		case <-deadline:
			t.Fatalf("the broker did not refuse %s; refusals: %q", want, got)
		}
	}
}

func TestTheCallerIsRefusedTheLeaseTheJetStreamAPIAndOthersCalls(t *testing.T) {
	d := natstest.StartDeployed(t)
	a := startEngine(t, userFile(t, d, "engine_a", "role: serve"))
	holder := a.Ownership().Record().Holder

	refused := newRefusals()
	caller := natstest.Connect(t, d.Server.ClientURL(), append(d.Options("caller_a"), nats.ErrorHandler(refused.handler))...)

	// The caller can use the services: the positive half of least privilege.
	kv := natsclient.NewKeyValue(natsclient.New(caller))
	if err := kv.Set(t.Context(), "k", []byte("v"), 0); err != nil {
		t.Fatalf("a caller's set: %v", err)
	}

	for _, subject := range []string{"abi.svc.>", "abi.svc.keyvalue.v1.get", "_INBOX.>", "$KV.ABI_ENGINE.>", "abi.rpc.overflow.>"} {
		if _, err := caller.SubscribeSync(subject); err != nil {
			t.Fatalf("subscribe %s: %v", subject, err)
		}
		refused.await(t, "Subscription to \""+subject+"\"")
	}
	put := nats.NewMsg("$KV.ABI_ENGINE.owner")
	put.Data = []byte(`{"instance_id":"forged"}`)
	del := nats.NewMsg("$KV.ABI_ENGINE.owner")
	del.Header.Set("KV-Operation", "DEL")
	for _, m := range []*nats.Msg{put, del} {
		if err := caller.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
		refused.await(t, "Publish to \"$KV.ABI_ENGINE.owner\"")
	}
	for _, api := range []string{"$JS.API.STREAM.PURGE.KV_ABI_ENGINE", "$JS.API.STREAM.DELETE.KV_ABI_ENGINE", "$JS.API.INFO"} {
		if _, err := caller.Request(api, nil, 500*time.Millisecond); err == nil {
			t.Fatalf("%s answered the caller", api)
		}
		refused.await(t, "Publish to \""+api+"\"")
	}

	// The lease is as the engine keeps it, read by the operator's user.
	ops := d.Connect(t, "ops_a")
	js, err := jetstream.New(ops)
	if err != nil {
		t.Fatal(err)
	}
	bucket, err := js.KeyValue(t.Context(), "ABI_ENGINE")
	if err != nil {
		t.Fatal(err)
	}
	entry, err := bucket.Get(t.Context(), "owner")
	if err != nil || !strings.Contains(string(entry.Value()), holder.InstanceID) {
		t.Fatalf("the lease reads %v, %v; want the engine %s", entry, err, holder.InstanceID)
	}
	if a.Ownership().State() != domain.StateServing {
		t.Fatalf("the engine is %v after the caller's attempts", a.Ownership().State())
	}
}

func TestAHandoverRunsUnderTheEngineUsersPermissions(t *testing.T) {
	d := natstest.StartDeployed(t)
	old := newEngine(t, userFile(t, d, "engine_a", "role: serve"))
	old.app.RequireStart()
	next := startEngine(t, userFile(t, d, "engine_a", "role: serve, hot_standby: true"))
	if next.Outcome() != domain.OutcomeStandby {
		t.Fatalf("the second engine is %v, want a standby", next.Outcome())
	}
	kv := natsclient.NewKeyValue(natsclient.New(d.Connect(t, "caller_a")))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := kv.Set(ctx, "before", []byte("1"), 0); err != nil {
		t.Fatalf("set before the handover: %v", err)
	}
	old.app.RequireStop()
	old.noRefusals(t)
	for next.Ownership().State() != domain.StateServing {
		select {
		case <-ctx.Done():
			t.Fatalf("the standby did not take over: %v", next.Ownership().State())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := kv.Set(ctx, "after", []byte("2"), 0); err != nil {
		t.Fatalf("set after the handover: %v", err)
	}
	if rec := next.Ownership().Record(); rec.Holder.InstanceID != next.Me().InstanceID {
		t.Fatalf("the lease names %+v after the handover", rec.Holder)
	}
}

// A client engine, such as a host of modules or the engine command's kv,
// runs as a least-privilege caller with the caller's inbox prefix. A
// caller may not touch the lease, so its engine is a client by role.
func TestAClientEngineRunsAsACaller(t *testing.T) {
	d := natstest.StartDeployed(t)
	startEngine(t, userFile(t, d, "engine_a", "role: serve"))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := natsclient.NewKeyValue(natsclient.New(d.Connect(t, "caller_a"))).Set(ctx, "ready", nil, 0); err != nil {
		t.Fatalf("the serving engine does not answer: %v", err)
	}
	t.Setenv(config.EnvRole, "client")
	callerFile := engineFile(t, d.Server.ClientURL(),
		fmt.Sprintf("{user: caller_a, password: %q}\n  inbox_prefix: %s", natstest.Password("caller_a"), natstest.InboxPrefix("caller_a")), "role: client")

	var stdout, stderr bytes.Buffer
	if code := enginecmd.Run([]string{"kv", "set", "from-cli", "hello", "--config", callerFile}, &stdout, &stderr, enginecmd.Options{}); code != 0 {
		t.Fatalf("engine kv set as caller_a = %d: %s", code, stderr.String())
	}
	stdout.Reset()
	if code := enginecmd.Run([]string{"kv", "get", "from-cli", "--config", callerFile}, &stdout, &stderr, enginecmd.Options{}); code != 0 || !strings.Contains(stdout.String(), "hello") {
		t.Fatalf("engine kv get as caller_a = %d: %q %s", code, stdout.String(), stderr.String())
	}
	if strings.Contains(strings.ToLower(stderr.String()), "permissions violation") {
		t.Fatalf("the broker refused the caller's engine something: %s", stderr.String())
	}
}
