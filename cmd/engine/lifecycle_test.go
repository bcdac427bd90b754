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

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/secondary/lease/jetstream"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/pgtest"
	"github.com/abi-engine/engine/internal/testenv"
	"github.com/abi-engine/engine/internal/wire"
)

// sharedConfig writes a configuration on shared backends only, as a deploy
// with rollout ids needs: keyvalue and document on PostgreSQL (tables of
// this test's own), the rest switched off.
func sharedConfig(t *testing.T, url string, extra string) string {
	t.Helper()
	path, _ := sharedConfigTable(t, url, extra)
	return path
}

// sharedConfigTable is sharedConfig, also naming the keyvalue table.
func sharedConfigTable(t *testing.T, url string, extra string) (path, kvTable string) {
	t.Helper()
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	table := pgtest.Table(t, dsn, "engine", "_kv", "_doc", "_doc_collections")
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
	path = filepath.Join(dir, "engine.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, table + "_kv"
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

// A call the engine is running when it is told to stop is answered before
// it exits. The test holds a row lock in PostgreSQL so that the engine's
// write of that key waits, stops the engine, then lets the write through.
func TestACallInProgressAtShutdownIsAnswered(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	config, table := sharedConfigTable(t, url, "")
	e := startEngine(t, config)
	e.waitLog(t, "state=serving")
	kv := natsclient.NewKeyValue(natsclient.New(natstest.Connect(t, url)))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := kv.Set(ctx, "held", []byte("before"), 0); err != nil {
		t.Fatal(err)
	}
	db, err := pgx.Connect(ctx, os.Getenv("ENGINE_TEST_PG_DSN"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+table+` WHERE key = $1 FOR UPDATE`, "held"); err != nil {
		t.Fatal(err)
	}
	answered := make(chan error, 1)
	go func() { answered <- kv.Set(ctx, "held", []byte("during"), 0) }()
	waitUntil(t, "the engine's write to wait on the lock", func() bool {
		var waiting int
		err := db.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE NOT granted`).Scan(&waiting)
		return err == nil && waiting > 0
	})

	if err := e.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	e.waitLog(t, "lease released")
	select {
	case err := <-answered:
		t.Fatalf("the call returned (%v) while its write still waited", err)
	case <-e.done:
		t.Fatalf("the engine exited with a call in progress:\n%s", e.output())
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-answered; err != nil {
		t.Fatalf("the call in progress at shutdown failed: %v\n%s", err, e.output())
	}
	if code := e.exitCode(t); code != 0 {
		t.Fatalf("exit code %d:\n%s", code, e.output())
	}
	var value []byte
	if err := db.QueryRow(ctx, `SELECT value FROM `+table+` WHERE key = $1`, "held").Scan(&value); err != nil || string(value) != "during" {
		t.Fatalf("stored %q, %v; want the write made during the shutdown", value, err)
	}
}

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
