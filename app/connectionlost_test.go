package app

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/fx"

	"github.com/abi-engine/engine/app/config"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// When the broker goes away for good, both of the engine's connections
// close and report it. The engine asks to stop once, with the exit code
// for a lost connection; a stop that then ends in time disarms the exit
// that guards against a hung stop, so a process that embeds the engine is
// not ended later by an engine that already stopped.
func TestABrokerGoneForGoodStopsTheEngineOnceAndAStopInTimeDisarmsTheExit(t *testing.T) {
	s := natstest.StartServer(t)
	cfg, built := memoryEngine(t, s.ClientURL())
	shutdowns := make(chan int, 8)
	var exits atomic.Int32
	e := NewEngine(EngineParams{
		Config: cfg, Holder: domain.ThisProcess("test", ""), Logger: slog.New(slog.DiscardHandler),
		Storage:  built,
		Shutdown: func(code int) { shutdowns <- code },
		Exit:     func(int) { exits.Add(1) },
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = e.Stop(context.Background())
		}
	})

	s.Shutdown()
	select {
	case code := <-shutdowns:
		if code != ExitConnectionLost {
			t.Fatalf("the engine asked to stop with code %d, want %d", code, ExitConnectionLost)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the engine did not ask to stop after its broker went away")
	}
	// Both connections have given up and reported it before the engine
	// stops; the stop would silence a late report.
	deadline := time.Now().Add(60 * time.Second)
	for !e.links.session.IsClosed() || !e.links.leaseConn.IsClosed() {
		if time.Now().After(deadline) {
			t.Fatal("the engine's connections did not close")
		}
		time.Sleep(10 * time.Millisecond)
	}

	if err := e.Stop(t.Context()); err != nil {
		t.Logf("stop without a broker: %v", err)
	}
	stopped = true
	if n := len(shutdowns); n != 0 {
		t.Errorf("the engine asked to stop %d more times", n)
	}
	exit := e.exitArmed.Load()
	if exit == nil {
		t.Fatal("no exit was armed when the broker went away")
	}
	if exit.Stop() {
		t.Error("the exit was still armed after the engine stopped")
	}
	if n := exits.Load(); n != 0 {
		t.Errorf("the engine ended the process %d times", n)
	}
}

// The kernel's subscriptions all live on the accepting connection. When it
// alone closes for good (here its reconnects are refused: the broker takes
// four connections, and another client took its place while it was away)
// the engine must stop, with the exit code for a lost connection, and stop
// cleanly: an engine that went on holding and renewing the lease with
// nothing subscribed would have every call find no responders, and no
// standby would ever take over.
func TestAnAcceptingConnectionClosedForGoodStopsTheEngine(t *testing.T) {
	s := natstest.StartWith(t, &server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true, MaxConn: 4, // the engine's four
	})
	cfg, built := memoryEngine(t, s.ClientURL())
	shutdowns := make(chan int, 8)
	e := NewEngine(EngineParams{
		Config: cfg, Holder: domain.ThisProcess("test", ""), Logger: slog.New(slog.DiscardHandler),
		Storage:  built,
		Shutdown: func(code int) { shutdowns <- code },
		Exit:     func(int) { t.Error("the engine ended the process") },
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = e.Stop(context.Background())
		}
	})

	// The accepting connection reaches the server's list of connections
	// a moment after the start on a loaded machine: wait for it.
	var accept uint64
	for deadline := time.Now().Add(10 * time.Second); accept == 0; {
		connz, err := s.Connz(&server.ConnzOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range connz.Conns {
			if strings.HasPrefix(c.Name, "abi-engine accept") {
				accept = c.Cid
			}
		}
		if accept == 0 && time.Now().After(deadline) {
			t.Fatalf("no accepting connection among %d after 10 s", len(connz.Conns))
		}
		if accept == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	refuseForGood(t, s, accept, "the accepting connection")
	awaitConnectionLost(t, shutdowns, e, "its accepting connection")
	if err := e.Stop(t.Context()); err != nil {
		t.Fatalf("stop after the accepting connection closed for good: %v", err)
	}
	stopped = true
}

// A store that keeps its data on NATS dials a connection of its own. When
// that connection alone closes for good (its reconnects are refused: the
// broker is full, another client having taken its place while it was
// away) the engine must stop, with the exit code for a lost connection,
// so that the standby takes over: an engine that went on holding and
// renewing the lease would fail every call of that service, and nothing
// would ever replace it. The engine is made by its fx graph.
func TestAStoreConnectionClosedForGoodStopsTheEngineAndTheStandbyTakesOver(t *testing.T) {
	// The serving engine's session, modules', lease, accepting and
	// keyvalue connections, and the standby's, which accepts nothing yet.
	const maxConn = 5 + 4
	s := natstest.StartWith(t, &server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true, MaxConn: maxConn,
	})
	config := func() *config.Config { return jetstreamKeyValueConfig(t, s.ClientURL(), true) }
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	startEngine := func() (*Engine, *fx.App) {
		var e *Engine
		a := fx.New(Graph(Options{Config: config(), Version: "test", Logger: slog.New(slog.DiscardHandler)}),
			fx.Populate(&e), fx.NopLogger)
		if err := a.Start(ctx); err != nil {
			t.Fatal(err)
		}
		// A second stop, after the test's own, stops nothing again.
		t.Cleanup(func() { _ = a.Stop(context.Background()) })
		return e, a
	}
	storeConn := func() uint64 {
		connz, err := s.Connz(&server.ConnzOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var cids []uint64
		for _, c := range connz.Conns {
			if c.Name == "abi-engine "+ports.ServiceKeyValue {
				cids = append(cids, c.Cid)
			}
		}
		if len(cids) != 1 {
			t.Fatalf("%d keyvalue store connections among %d, want 1", len(cids), len(connz.Conns))
		}
		return cids[0]
	}

	served, a := startEngine()
	if served.Outcome() != domain.OutcomeServe {
		t.Fatalf("the first engine's outcome is %v, want serve", served.Outcome())
	}
	kicked := storeConn()
	standby, _ := startEngine()
	if standby.Outcome() != domain.OutcomeStandby {
		t.Fatalf("the second engine's outcome is %v, want standby", standby.Outcome())
	}
	if n := s.NumClients(); n != maxConn {
		t.Fatalf("the engines hold %d connections, want %d: the broker would not be full", n, maxConn)
	}
	signals := a.Wait()

	squatter := refuseForGood(t, s, kicked, "the store's connection")
	select {
	case sig := <-signals:
		if sig.ExitCode != ExitConnectionLost {
			t.Fatalf("the engine asked to stop with code %d, want %d", sig.ExitCode, ExitConnectionLost)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("60 s after its store's connection was refused for good the engine had not asked to stop (state %v, ready %v)",
			served.Ownership().State(), served.Ready())
	}
	// The broker need be full no longer: the standby takes over while the
	// engine stops, and needs a place for its accepting connection.
	squatter.Close()
	if err := a.Stop(ctx); err != nil {
		t.Fatalf("stop after the store's connection closed for good: %v", err)
	}

	for standby.Ownership().State() != domain.StateServing {
		select {
		case <-ctx.Done():
			t.Fatalf("the standby did not take over: state %v", standby.Ownership().State())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := standby.Services().KeyValue.Set(ctx, "k", []byte("v"), 0); err != nil {
		t.Fatalf("a call through the engine that took over: %v", err)
	}
}

// An engine made with NewEngine, on storage resolved by BuildStorage,
// stops too when its store's connection closes for good. Before, only the
// engine's fx graph handed the engine's handler to its stores'
// connections, and this engine served on, failing every call of the
// service.
func TestAStoreConnectionClosedForGoodStopsAnEngineMadeWithNewEngine(t *testing.T) {
	// The engine's session, modules', lease, accepting and keyvalue
	// connections.
	const maxConn = 5
	s := natstest.StartWith(t, &server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true, MaxConn: maxConn,
	})
	cfg := jetstreamKeyValueConfig(t, s.ClientURL(), false)
	built, err := BuildStorage(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stops := make(chan int, 1)
	e := NewEngine(EngineParams{
		Config: cfg, Holder: domain.ThisProcess("test", ""), Logger: slog.New(slog.DiscardHandler), Storage: built,
		Shutdown: func(code int) { stops <- code }, Exit: func(int) {},
	})
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop(context.Background()) })
	connz, err := s.Connz(&server.ConnzOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var kicked uint64
	for _, c := range connz.Conns {
		if c.Name == "abi-engine "+ports.ServiceKeyValue {
			kicked = c.Cid
		}
	}
	if kicked == 0 || s.NumClients() != maxConn {
		t.Fatalf("the engine holds %d connections, want %d with one for the keyvalue store", s.NumClients(), maxConn)
	}
	refuseForGood(t, s, kicked, "the store's connection")
	awaitConnectionLost(t, stops, e, "its store's connection")
}

// refuseForGood disconnects the client cid (what) from s, which holds as
// many connections as it takes, and takes the place it left: the client's
// reconnects (natsconn's, about ten seconds of them) are refused, then it
// closes for good. The connection in its place closes as the test ends.
func refuseForGood(t *testing.T, s *server.Server, cid uint64, what string) *nats.Conn {
	t.Helper()
	if err := s.DisconnectClientByID(cid); err != nil {
		t.Fatal(err)
	}
	squatter, err := nats.Connect(s.ClientURL(), nats.NoReconnect())
	if err != nil {
		t.Fatalf("take the place %s left: %v", what, err)
	}
	t.Cleanup(squatter.Close)
	return squatter
}

// awaitConnectionLost waits up to a minute for e to ask, on codes, to stop
// with ExitConnectionLost once its connection (what) closed for good.
func awaitConnectionLost(t *testing.T, codes <-chan int, e *Engine, what string) {
	t.Helper()
	select {
	case code := <-codes:
		if code != ExitConnectionLost {
			t.Fatalf("the engine asked to stop with code %d, want %d", code, ExitConnectionLost)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("60 s after %s was refused for good the engine had not asked to stop (state %v, ready %v)",
			what, e.Ownership().State(), e.Ready())
	}
}

// jetstreamKeyValueConfig is an engine's configuration on the broker at
// url, with its keyvalue in the JetStream bucket ABI_KV, every other
// service in memory, a lease of a second and a data directory of its own;
// hot makes it a hot standby.
func jetstreamKeyValueConfig(t *testing.T, url string, hot bool) *config.Config {
	t.Helper()
	yaml := fmt.Sprintf(`nats:
  url: %s
  engine: {role: serve, hot_standby: %t, lease_seconds: 1, drain_seconds: 1}
http: {listen: off}
data_dir: %s
services:
  keyvalue: {adapter: jetstream, config: {bucket: ABI_KV}}
  document: {adapter: memory}
  object_storage: {adapter: memory}
  vector_store: {adapter: memory}
  cache: {adapter: memory}
  secret: {adapter: env}
`, url, hot, filepath.Join(t.TempDir(), "data"))
	cfg, err := config.Parse("test.yaml", []byte(yaml), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
