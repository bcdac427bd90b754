package app

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/secondary/lease/jetstream"
	"github.com/abi-engine/engine/internal/natstest"
)

// panicky is a module that panics in its start or in its stop.
type panicky struct {
	name        string
	start, stop bool
	o           *order
}

func (m panicky) Name() string    { return m.name }
func (m panicky) Needs() []string { return nil }
func (m panicky) Start(context.Context, ModuleEnv) error {
	if m.start {
		panic("start of " + m.name)
	}
	m.o.add("start " + m.name)
	return nil
}

func (m panicky) Stop(context.Context) error {
	if m.stop {
		panic("stop of " + m.name)
	}
	m.o.add("stop " + m.name)
	return nil
}

// leaseIsFree reports whether the account's lease is free, as the next
// engine reads it.
func leaseIsFree(t *testing.T, url string) bool {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	l, err := jetstream.Open(ctx, nc, jetstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := l.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return rec.Free()
}

// A module whose start panics fails the engine's start with an error
// naming the module; the modules started before it are stopped and the
// lease is released, as for a start that returns an error. A module whose
// stop panics fails the engine's stop, naming it, and the other modules
// are stopped still. Before, either panic ended the process at once,
// holding the lease: no engine served until it ran out.
func TestAModuleThatPanicsFailsTheStartOrTheStopAndTheLeaseIsReleased(t *testing.T) {
	t.Run("start", func(t *testing.T) {
		s := natstest.StartServer(t)
		o := &order{}
		e := moduleEngine(t, s.ClientURL(), panicky{name: "a", o: o}, panicky{name: "b", start: true, o: o})
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		err := e.Start(ctx)
		if err == nil || !strings.Contains(err.Error(), "start module b: start panicked: start of b") {
			t.Fatalf("start: %v, want module b's panic", err)
		}
		if got, want := o.seen(), []string{"start a", "stop a"}; !slices.Equal(got, want) {
			t.Fatalf("modules: %q, want %q", got, want)
		}
		if !leaseIsFree(t, s.ClientURL()) {
			t.Fatal("the lease is held after a start that failed")
		}
	})
	t.Run("stop", func(t *testing.T) {
		s := natstest.StartServer(t)
		o := &order{}
		e := moduleEngine(t, s.ClientURL(), panicky{name: "a", o: o}, panicky{name: "b", stop: true, o: o})
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if err := e.Start(ctx); err != nil {
			t.Fatal(err)
		}
		err := e.Stop(ctx)
		if err == nil || !strings.Contains(err.Error(), "stop module b: stop panicked: stop of b") {
			t.Fatalf("stop: %v, want module b's panic", err)
		}
		if got, want := o.seen(), []string{"start a", "start b", "stop a"}; !slices.Equal(got, want) {
			t.Fatalf("modules: %q, want %q", got, want)
		}
		if !leaseIsFree(t, s.ClientURL()) {
			t.Fatal("the lease is held after a stop")
		}
	})
}
