package app

import (
	"context"
	"testing"
	"time"

	"github.com/abi-engine/engine/internal/natstest"
)

// stuckJob is a module whose job's first run does not heed its context:
// it returns only once let is closed.
type stuckJob struct {
	let     chan struct{}
	running chan struct{}
}

func (stuckJob) Name() string               { return "stuck" }
func (stuckJob) Needs() []string            { return nil }
func (stuckJob) Stop(context.Context) error { return nil }
func (m stuckJob) Start(_ context.Context, env ModuleEnv) error {
	first := true
	return env.Jobs.Register(Job{Name: "stuck", Every: 10 * time.Millisecond, Run: func(context.Context) error {
		if first {
			first = false
			close(m.running)
			<-m.let
		}
		return nil
	}})
}

// A job run that does not return when the engine's stop cancels it holds
// up the stop, and the release of the lease, for a lease at most, as a
// crash would: the engine then releases the lease, drains and stops. Before,
// the stop waited on the run for good, holding and renewing the lease, so
// no standby took over, and the process ended on fx's timeout.
func TestAJobRunThatDoesNotReturnHoldsUpTheReleaseForALeaseAtMost(t *testing.T) {
	s := natstest.StartServer(t)
	m := stuckJob{let: make(chan struct{}), running: make(chan struct{})}
	t.Cleanup(func() { close(m.let) })
	e := moduleEngine(t, s.ClientURL(), m)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.running:
	case <-time.After(time.Minute):
		t.Fatal("the job never ran")
	}
	stopped := make(chan error, 1)
	go func() { stopped <- e.Stop(ctx) }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("stop: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the engine's stop still waits on the job's run a minute later")
	}
	if !leaseIsFree(t, s.ClientURL()) {
		t.Fatal("the lease is held after the stop")
	}
}
