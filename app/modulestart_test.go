package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/abi-engine/engine/internal/natstest"
)

// deafStart is a module whose Start does not heed its context: it
// returns only once let is closed.
type deafStart struct {
	let      chan struct{}
	starting chan struct{}
}

func (deafStart) Name() string               { return "deaf" }
func (deafStart) Needs() []string            { return nil }
func (deafStart) Stop(context.Context) error { return nil }
func (m deafStart) Start(context.Context, ModuleEnv) error {
	close(m.starting)
	<-m.let
	return nil
}

// A module whose Start does not return does not hold up an interrupted
// start: the start fails, naming the module, and the lease is released.
// Before, the start waited on it for good, serving and holding the lease,
// until the process ended on fx's timeout, with the lease still held.
func TestAModuleThatDoesNotStartHoldsUpNeitherTheStartNorTheRelease(t *testing.T) {
	s := natstest.StartServer(t)
	m := deafStart{let: make(chan struct{}), starting: make(chan struct{})}
	t.Cleanup(func() { close(m.let) })
	e := moduleEngine(t, s.ClientURL(), m)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	returned := make(chan error, 1)
	go func() { returned <- e.Start(ctx) }()
	select {
	case <-m.starting:
	case <-time.After(time.Minute):
		t.Fatal("the module's start never began")
	}
	e.Interrupt()
	select {
	case err := <-returned:
		if err == nil || !strings.Contains(err.Error(), "start module deaf: it did not return within the start's time") {
			t.Fatalf("start: %v, want an error naming the module that did not start", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the engine's start still waits on the module a minute after it was interrupted")
	}
	if !leaseIsFree(t, s.ClientURL()) {
		t.Fatal("the lease is held after a start that failed")
	}
}
