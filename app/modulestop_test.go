package app

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/abi-engine/engine/internal/natstest"
)

// deaf is a module whose Stop does not heed its context: it returns only
// once let is closed.
type deaf struct {
	let      chan struct{}
	stopping chan struct{}
}

func (deaf) Name() string                           { return "deaf" }
func (deaf) Needs() []string                        { return nil }
func (deaf) Start(context.Context, ModuleEnv) error { return nil }
func (m deaf) Stop(context.Context) error {
	close(m.stopping)
	<-m.let
	return nil
}

// refusing is a module whose start fails.
type refusing struct{}

func (refusing) Name() string                           { return "refusing" }
func (refusing) Needs() []string                        { return nil }
func (refusing) Start(context.Context, ModuleEnv) error { return errors.New("refused") }
func (refusing) Stop(context.Context) error             { return nil }

// A module whose Stop does not return holds up neither the engine's stop
// nor the clean-up of a start that failed: each returns once its time for
// the modules is up, naming the module, and the lease is free. Before, the
// stop waited on it for good, and a failed start's clean-up did too,
// before it released the lease.
func TestAModuleThatDoesNotStopHoldsUpNeitherTheStopNorTheRelease(t *testing.T) {
	for _, failedStart := range []bool{false, true} {
		name := "stop"
		if failedStart {
			name = "failed start"
		}
		t.Run(name, func(t *testing.T) {
			s := natstest.StartServer(t)
			m := deaf{let: make(chan struct{}), stopping: make(chan struct{})}
			t.Cleanup(func() { close(m.let) })
			modules := []Module{m}
			if failedStart {
				modules = append(modules, refusing{})
			}
			e := moduleEngine(t, s.ClientURL(), modules...)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			returned := make(chan error, 1)
			go func() {
				err := e.Start(ctx)
				if err == nil {
					err = e.Stop(ctx)
				}
				returned <- err
			}()
			var err error
			select {
			case err = <-returned:
			case <-time.After(time.Minute):
				t.Fatal("the engine's stop still waits on the module a minute later")
			}
			want := "stop module deaf: it did not return within the stop's time"
			if failedStart {
				want = "start module refusing: refused" // the module's stop is logged
			}
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("error %v, want %q", err, want)
			}
			select {
			case <-m.stopping:
			default:
				t.Fatal("the module was not stopped")
			}
			if !leaseIsFree(t, s.ClientURL()) {
				t.Fatal("the lease is held")
			}
		})
	}
}
