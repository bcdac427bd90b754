package app

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	leasejs "github.com/abi-engine/engine/adapters/secondary/lease/jetstream"
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
	want := "engine " + first.Me().InstanceID + " has this storage"
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

// An engine given storage another engine in the process has is refused as
// its start begins, before it reaches the broker or the lease. Before, the
// refusal came when its claim's outcome opened the stores: here, where the
// second engine's account (a broker of its own) had no engine serving, it
// took that lease, served no call, and released it, and beside a standby
// of one account it would have taken the lease the standby waited for.
func TestAnEngineGivenStorageAnotherEngineHasIsRefusedBeforeItTouchesTheLease(t *testing.T) {
	first, second := natstest.StartServer(t), natstest.StartServer(t)
	built, err := BuildStorage(jetstreamKeyValueConfig(t, first.ClientURL(), false))
	if err != nil {
		t.Fatal(err)
	}
	engine := func(url string) *Engine {
		return NewEngine(EngineParams{
			Config: jetstreamKeyValueConfig(t, url, false), Holder: domain.ThisProcess("test", ""),
			Logger: slog.New(slog.DiscardHandler), Storage: built,
			Shutdown: func(int) {}, Exit: func(int) {},
		})
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	serving := engine(first.ClientURL())
	if err := serving.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = serving.Stop(context.Background()) })

	refused := engine(second.ClientURL())
	err = refused.Start(ctx)
	if err == nil {
		_ = refused.Stop(context.Background())
		t.Fatalf("an engine started on storage another engine has")
	}
	want := "engine " + serving.Me().InstanceID + " has this storage"
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("the refused engine's start: %v, want an error saying %q", err, want)
	}
	js, err := jetstream.New(natstest.Connect(t, second.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	if kv, err := js.KeyValue(ctx, leasejs.DefaultBucket); !errors.Is(err, jetstream.ErrBucketNotFound) {
		var rec string
		if err == nil {
			if e, gerr := kv.Get(ctx, leasejs.Key); gerr == nil {
				rec = string(e.Value())
			}
		}
		t.Fatalf("the refused engine's account has a lease bucket (%v), its record %q: the engine claimed the lease before it was refused", err, rec)
	}
	if err := serving.Services().KeyValue.Set(ctx, "k", []byte("v"), 0); err != nil {
		t.Fatalf("a call through the engine that has the storage: %v", err)
	}
}
