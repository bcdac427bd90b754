package app

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/document/memory"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// refusingLater fails its start, once the modules before it have started
// and the engine serves.
type refusingLater struct{}

func (refusingLater) Name() string                           { return "refusing" }
func (refusingLater) Needs() []string                        { return nil }
func (refusingLater) Start(context.Context, ModuleEnv) error { return errors.New("refused") }
func (refusingLater) Stop(context.Context) error             { return nil }

// A start that fails once the engine holds the lease releases it, and the
// activity log keeps that release next to the acquisition. Before, the
// clean-up stopped the modules, the activity log among them, before it
// released the lease, so the log said the engine acquired the lease and
// never that it let it go, while its successor's entry said it had.
func TestTheReleaseOfAFailedStartIsLogged(t *testing.T) {
	s := natstest.StartServer(t)
	activity := NewActivity(domain.Holder{}, slog.New(slog.DiscardHandler))
	e := moduleEngine(t, s.ClientURL(), activity, refusingLater{})
	activity.me = e.Me()
	docs := memory.New() // outlives the engine, as a shared store does
	activity.current, activity.own = e.leaseState, func() ports.DocumentStore { return docs }
	e.Observe(activity.Observe)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := e.Start(ctx); err == nil || !strings.Contains(err.Error(), "refused") {
		if err == nil {
			_ = e.Stop(ctx)
		}
		t.Fatalf("the start returned %v, want the module's refusal", err)
	}
	h, err := History(ctx, docs, 10)
	if err != nil {
		t.Fatal(err)
	}
	events := make([]string, len(h))
	for i, entry := range h {
		events[i] = entry.Event
	}
	if !slices.Contains(events, EventAcquired) || !slices.Contains(events, EventReleased) {
		t.Fatalf("the activity log of an engine whose start failed after it took the lease holds %v, want %s and %s",
			events, EventAcquired, EventReleased)
	}
}
