package app

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/abi-engine/engine/internal/natstest"
)

// jobbed is a module with a job, which its Start waits to see run once.
// Its Stop notes whether the engine's jobs still ran, or had a run in
// progress, as it began.
type jobbed struct {
	ran     chan struct{}
	stopped chan string // what the jobs did as Stop began: "" when they had stopped
	jobs    *Jobs
}

func (*jobbed) Name() string    { return "jobbed" }
func (*jobbed) Needs() []string { return nil }
func (m *jobbed) Start(ctx context.Context, env ModuleEnv) error {
	m.jobs = env.Jobs
	first := true
	if err := env.Jobs.Register(Job{Name: "tick", Every: 10 * time.Millisecond, Run: func(context.Context) error {
		if first {
			first = false
			close(m.ran)
		}
		return nil
	}}); err != nil {
		return err
	}
	select {
	case <-m.ran:
		return nil
	case <-ctx.Done():
		return errors.New("the job never ran")
	}
}

func (m *jobbed) Stop(context.Context) error {
	j := m.jobs
	j.mu.Lock()
	scheduled := j.ctx != nil
	j.mu.Unlock()
	var seen []string
	if scheduled {
		seen = append(seen, "the jobs were still scheduled")
	}
	if busy := j.inProgress(); len(busy) > 0 {
		seen = append(seen, "runs of "+strings.Join(busy, ", ")+" were in progress")
	}
	m.stopped <- strings.Join(seen, "; ")
	return nil
}

// A start that fails at a module stops the jobs before it stops the
// modules started, as a stop does: a module's job does not run on while,
// or after, its module stops. Before, the clean-up stopped the modules
// first, and their jobs ran on every period until the lease was released.
func TestAFailedStartStopsTheJobsBeforeTheModules(t *testing.T) {
	s := natstest.StartServer(t)
	m := &jobbed{ran: make(chan struct{}), stopped: make(chan string, 1)}
	e := moduleEngine(t, s.ClientURL(), m, refusing{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := e.Start(ctx); err == nil || !strings.Contains(err.Error(), "start module refusing") {
		t.Fatalf("start: %v, want module refusing's refusal", err)
	}
	select {
	case seen := <-m.stopped:
		if seen != "" {
			t.Fatalf("as the module's stop began, %s", seen)
		}
	default:
		t.Fatal("the failed start did not stop the module it had started")
	}
}
