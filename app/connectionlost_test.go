package app

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

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
