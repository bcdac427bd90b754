package app

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
)

// What one BuildStorage call built serves one engine at a time: a second
// engine in the process that opens it while the first has it open fails
// its start, naming the first, which serves on; once the first has
// stopped, another engine opens it. Before, the second opened it and
// bound the stores to itself, the first's included: they logged on the
// second's log, and a store of the first that dialed its connection after
// that bind told the second, not the first, when it closed for good.
func TestOneBuildOfStorageServesOneEngineAtATime(t *testing.T) {
	s := natstest.StartServer(t)
	cfg := jetstreamKeyValueConfig(t, s.ClientURL(), true)
	built, err := BuildStorage(cfg)
	if err != nil {
		t.Fatal(err)
	}
	engine := func() *Engine {
		return NewEngine(EngineParams{
			Config: jetstreamKeyValueConfig(t, s.ClientURL(), true), Holder: domain.ThisProcess("test", ""),
			Logger: slog.New(slog.DiscardHandler), Storage: built,
			Shutdown: func(int) {}, Exit: func(int) {},
		})
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	first := engine()
	if err := first.Start(ctx); err != nil {
		t.Fatal(err)
	}
	firstStopped := false
	t.Cleanup(func() {
		if !firstStopped {
			_ = first.Stop(context.Background())
		}
	})
	if first.Outcome() != domain.OutcomeServe {
		t.Fatalf("the first engine's outcome is %v, want serve", first.Outcome())
	}

	second := engine()
	err = second.Start(ctx)
	if err == nil {
		_ = second.Stop(context.Background())
		t.Fatalf("a second engine opened the storage the first has open")
	}
	want := "engine " + first.Me().InstanceID + " has this storage open"
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("the second engine's start: %v, want an error saying %q", err, want)
	}
	if got := first.Ownership().State(); got != domain.StateServing {
		t.Fatalf("the first engine is %v after the second's refusal, want serving", got)
	}
	if err := first.Services().KeyValue.Set(ctx, "k", []byte("v"), 0); err != nil {
		t.Fatalf("a call through the first engine after the second's refusal: %v", err)
	}

	if err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	firstStopped = true
	third := engine()
	if err := third.Start(ctx); err != nil {
		t.Fatalf("an engine that opens the storage once the first has stopped: %v", err)
	}
	t.Cleanup(func() { _ = third.Stop(context.Background()) })
	if err := third.Services().KeyValue.Set(ctx, "k", []byte("w"), 0); err != nil {
		t.Fatalf("a call through the engine that opened the storage after the first: %v", err)
	}
}
