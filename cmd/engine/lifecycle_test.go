package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/secondary/lease/jetstream"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/testenv"
	"github.com/abi-engine/engine/internal/wire"
)

// sharedConfig writes a configuration on shared backends only, as a deploy
// with rollout ids needs: keyvalue and document on PostgreSQL (tables of
// this test's own), the rest switched off.
func sharedConfig(t *testing.T, url string, extra string) string {
	t.Helper()
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	table := fmt.Sprintf("t%d_%s", time.Now().UnixNano()%1e9, strings.ToLower(strings.NewReplacer("/", "_", "-", "_").Replace(t.Name())))
	if len(table) > 40 {
		table = table[:40]
	}
	dir := t.TempDir()
	yaml := fmt.Sprintf(`nats:
  url: %s
  engine: {lease_seconds: 1, drain_seconds: 5%s}
http: {listen: "127.0.0.1:0"}
data_dir: %s
services:
  keyvalue: {adapter: postgres, config: {dsn: %q, table: %s_kv}}
  document: {adapter: postgres, config: {dsn: %q, table: %s_doc}}
  object_storage: {adapter: off}
  vector_store: {adapter: off}
  cache: {adapter: off}
  secret: {adapter: env}
`, url, extra, filepath.Join(dir, "data"), dsn, table, dsn, table)
	path := filepath.Join(dir, "engine.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// traffic calls the engine without pause until stopped: callers doing
// set-then-get through the keyvalue facade, and one asking every 10 ms which
// engine answers.
type traffic struct {
	stop    chan struct{}
	wg      sync.WaitGroup
	calls   atomic.Int64
	mu      sync.Mutex
	failed  []string
	answers []string // instance ids, in order
}

func startTraffic(t *testing.T, url string, callers int) *traffic {
	tr := &traffic{stop: make(chan struct{})}
	for i := range callers {
		kv := natsclient.NewKeyValue(natsclient.New(natstest.Connect(t, url)))
		tr.wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-tr.stop:
					return
				default:
				}
				key, val := fmt.Sprintf("caller%d/%d", i, n%50), []byte(fmt.Sprint(n))
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := kv.Set(ctx, key, val, 0)
				if err == nil {
					var got []byte
					got, err = kv.Get(ctx, key)
					if err == nil && string(got) != string(val) {
						err = fmt.Errorf("read %q after writing %q", got, val)
					}
				}
				cancel()
				tr.record(err)
			}
		})
	}
	client := natsclient.New(natstest.Connect(t, url))
	tr.wg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tr.stop:
				return
			case <-tick.C:
			}
			var info wire.EngineInfoReply
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := client.Call(ctx, wire.Subject(wire.ServiceEngine, wire.EngineInfo), wire.Empty{}, &info)
			cancel()
			tr.record(err)
			if err == nil {
				tr.mu.Lock()
				tr.answers = append(tr.answers, info.InstanceID)
				tr.mu.Unlock()
			}
		}
	})
	return tr
}

func (tr *traffic) record(err error) {
	tr.calls.Add(1)
	if err != nil {
		tr.mu.Lock()
		tr.failed = append(tr.failed, fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), err))
		tr.mu.Unlock()
	}
}

func (tr *traffic) end() {
	close(tr.stop)
	tr.wg.Wait()
}

func TestADeployHandsOverUnderTrafficWithoutAFailedCall(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	config := sharedConfig(t, url, "")
	old := startEngine(t, config, "ABI_ROLLOUT_ID=v1")
	old.waitLog(t, "state=serving")
	next := startEngine(t, config, "ABI_ROLLOUT_ID=v2")
	next.waitLog(t, "state=standby")
	oldID, nextID := readLease(t, url).Holder.InstanceID, ""

	tr := startTraffic(t, url, 3)
	time.Sleep(time.Second)
	if err := old.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	next.waitLog(t, "standby took over the lease")
	if code := old.exitCode(t); code != 0 {
		t.Fatalf("old engine exit code %d:\n%s", code, old.output())
	}
	time.Sleep(time.Second)
	tr.end()

	nextID = readLease(t, url).Holder.InstanceID
	if len(tr.failed) > 0 {
		t.Fatalf("%d of %d calls failed across the deploy, first: %s", len(tr.failed), tr.calls.Load(), tr.failed[0])
	}
	if tr.calls.Load() < 100 {
		t.Fatalf("only %d calls made: the traffic did not run", tr.calls.Load())
	}
	first, last := tr.answers[0], tr.answers[len(tr.answers)-1]
	if first != oldID || last != nextID || nextID == oldID {
		t.Fatalf("answers went from %s to %s; want from the old engine %s to the new %s", first, last, oldID, nextID)
	}
	if strings.Contains(next.output(), "lost") {
		t.Fatalf("the new engine reports a lost lease:\n%s", next.output())
	}
}

func TestAfterACrashTheStandbyAnswersEveryLaterCall(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	config := sharedConfig(t, url, "")
	old := startEngine(t, config, "ABI_ROLLOUT_ID=v1")
	old.waitLog(t, "state=serving")
	next := startEngine(t, config, "ABI_ROLLOUT_ID=v2")
	next.waitLog(t, "state=standby")

	kv := natsclient.NewKeyValue(natsclient.New(natstest.Connect(t, url)))
	if err := old.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	old.exitCode(t)
	// Calls the dead engine had received are lost with it; every call sent
	// after the crash waits, through the retry, for the standby.
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 25 * time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errs <- kv.Set(ctx, fmt.Sprint("after-crash/", i), []byte("v"), 0)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a call sent after the crash failed: %v", err)
		}
	}
	next.waitLog(t, "standby took over the lease")
	if took := time.Since(killed); took < 500*time.Millisecond {
		t.Fatalf("the standby took over %v after the crash, before a lease of silence", took)
	}
}

func TestCallsInFlightAtShutdownAreAnswered(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	e := startEngine(t, sharedConfig(t, url, ""))
	e.waitLog(t, "state=serving")
	kv := natsclient.NewKeyValue(natsclient.New(natstest.Connect(t, url)))

	var stopped atomic.Bool
	var sentBefore, failedBefore atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for n := 0; !stopped.Load(); n++ {
				before := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := kv.Set(ctx, fmt.Sprintf("inflight/%d/%d", i, n), []byte("v"), 0)
				cancel()
				if signalledAt := signalTime.Load(); signalledAt == nil || before.Before(*signalledAt) {
					sentBefore.Add(1)
					if err != nil {
						failedBefore.Add(1)
						t.Errorf("a call sent before SIGTERM failed: %v", err)
					}
				}
			}
		})
	}
	time.Sleep(500 * time.Millisecond)
	now := time.Now()
	signalTime.Store(&now)
	if err := e.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := e.exitCode(t); code != 0 {
		t.Fatalf("exit code %d:\n%s", code, e.output())
	}
	stopped.Store(true)
	wg.Wait()
	if sentBefore.Load() < 10 || failedBefore.Load() != 0 {
		t.Fatalf("%d of %d calls sent before SIGTERM failed", failedBefore.Load(), sentBefore.Load())
	}
}

var signalTime atomic.Pointer[time.Time]

func TestARolloutWithLocalBackendsIsRefusedBeforeAnythingOpens(t *testing.T) {
	s := natstest.StartServer(t)
	config := writeConfig(t, s.ClientURL())
	e := startEngine(t, config, "ABI_ROLLOUT_ID=r7")
	if code := e.exitCode(t); code != 1 {
		t.Fatalf("exit code %d, want 1:\n%s", code, e.output())
	}
	for _, want := range []string{`rollout "r7" needs shared backends`, "keyvalue keeps its data in SQLite"} {
		if !strings.Contains(e.output(), want) {
			t.Errorf("output does not say %q:\n%s", want, e.output())
		}
	}
	assertNoTrace(t, s, filepath.Dir(config))
}

// assertNoTrace checks that nothing was written under dir but the
// configuration, and that no client ever connected to the broker.
func assertNoTrace(t *testing.T, s *server.Server, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "engine.yaml" {
			t.Errorf("the engine left %s in its directory", e.Name())
		}
	}
	connz, err := s.Connz(&server.ConnzOptions{State: server.ConnAll})
	if err != nil {
		t.Fatal(err)
	}
	if connz.Total != 0 {
		t.Errorf("the engine opened %d NATS connections", connz.Total)
	}
}

func TestAClientEngineOpensNoBackend(t *testing.T) {
	s := natstest.StartServer(t)
	config := writeConfig(t, s.ClientURL())
	e := startEngine(t, config, "ABI_ENGINE_ROLE=client")
	e.waitLog(t, "state=client")
	if err := e.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := e.exitCode(t); code != 0 {
		t.Fatalf("exit code %d:\n%s", code, e.output())
	}
	entries, err := os.ReadDir(filepath.Dir(config))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range entries {
		if d.Name() != "engine.yaml" {
			t.Errorf("a client engine created %s", d.Name())
		}
	}
	js, err := natstest.Connect(t, s.ClientURL()).JetStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.KeyValue(jetstream.DefaultBucket); !errors.Is(err, nats.ErrBucketNotFound) {
		t.Fatalf("a client engine touched the lease bucket: %v", err)
	}
}

func TestAutoNextToAServingEngineIsAClient(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	config := writeConfig(t, url)
	first := startEngine(t, config)
	first.waitLog(t, "state=serving")
	auto := startEngine(t, config, "ABI_ENGINE_ROLE=auto")
	auto.waitLog(t, "state=client")
	if err := auto.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := auto.exitCode(t); code != 0 {
		t.Fatalf("exit code %d:\n%s", code, auto.output())
	}
}

func TestAStandbyWhoseOldEngineNeverStopsTimesOut(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	config := sharedConfig(t, url, ", standby_timeout_seconds: 2")
	old := startEngine(t, config, "ABI_ROLLOUT_ID=v1")
	old.waitLog(t, "state=serving")
	next := startEngine(t, config, "ABI_ROLLOUT_ID=v2")
	next.waitLog(t, "state=standby")
	if code := next.exitCode(t); code == 0 {
		t.Fatalf("a standby that timed out exited 0:\n%s", next.output())
	}
	if !strings.Contains(next.output(), "standby timed out") {
		t.Fatalf("the standby does not say it timed out:\n%s", next.output())
	}
}

func TestTheBrokerGoneForGoodStopsTheEngine(t *testing.T) {
	s := natstest.StartServer(t)
	e := startEngine(t, writeConfig(t, s.ClientURL()))
	e.waitLog(t, "state=serving")
	s.Shutdown()
	gone := time.Now()
	if code := e.exitCode(t); code == 0 {
		t.Fatalf("the engine exited 0 without its broker:\n%s", e.output())
	}
	if took := time.Since(gone); took > 20*time.Second {
		t.Fatalf("the engine stayed up %v without its broker", took)
	}
}
