package app

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
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
	for !e.session.IsClosed() || !e.leaseConn.IsClosed() {
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
// three connections, and another client took its place while it was away)
// the engine must stop, with the exit code for a lost connection, and stop
// cleanly: an engine that went on holding and renewing the lease with
// nothing subscribed would have every call find no responders, and no
// standby would ever take over.
func TestAnAcceptingConnectionClosedForGoodStopsTheEngine(t *testing.T) {
	s := natstest.StartWith(t, &server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true, MaxConn: 3, // the engine's three
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

	connz, err := s.Connz(&server.ConnzOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var accept uint64
	for _, c := range connz.Conns {
		if strings.HasPrefix(c.Name, "abi-engine accept") {
			accept = c.Cid
		}
	}
	if accept == 0 {
		t.Fatalf("no accepting connection among %d", len(connz.Conns))
	}
	if err := s.DisconnectClientByID(accept); err != nil {
		t.Fatal(err)
	}
	squatter, err := nats.Connect(s.ClientURL(), nats.NoReconnect())
	if err != nil {
		t.Fatalf("take the place the accepting connection left: %v", err)
	}
	t.Cleanup(squatter.Close)

	// Its reconnects (natsconn's, about ten seconds of them) are refused,
	// then it closes for good.
	select {
	case code := <-shutdowns:
		if code != ExitConnectionLost {
			t.Fatalf("the engine asked to stop with code %d, want %d", code, ExitConnectionLost)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("60 s after its accepting connection was refused for good the engine had not asked to stop (state %v, ready %v)",
			e.Ownership().State(), e.Ready())
	}
	if err := e.Stop(t.Context()); err != nil {
		t.Fatalf("stop after the accepting connection closed for good: %v", err)
	}
	stopped = true
}
