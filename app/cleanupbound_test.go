package app

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/app/config"
	"github.com/abi-engine/engine/domain"
)

// The time fx leaves a start that failed to clean up covers the longest
// each of its steps can take, one after another, as the engine sets them:
// the wait for the jobs' runs, the modules' stop, the kernel's three hosts
// stopped in turn, the end of the renewal in flight and the write of the
// released record, each cut off after a renewal period, and the fence the
// release can bring about. It gave a drain, a lease and 10 s, short of
// that sum from a lease of 5 s on, so a start that failed after its whole
// start limit could run past fx's start timeout, and the process exited
// on it holding the lease.
func TestAFailedStartsCleanUpBoundCoversItsLongestSteps(t *testing.T) {
	for _, lease := range []int{1, 4, 5, 16, 17, 20, 60, 300} {
		for _, drain := range []int{0, 1, 60} {
			t.Run(fmt.Sprintf("lease%ds/drain%ds", lease, drain), func(t *testing.T) {
				cfg := leaseAndDrain(t, lease, drain)
				e := NewEngine(EngineParams{Config: cfg, Holder: domain.ThisProcess("test", ""), Logger: slog.New(slog.DiscardHandler)})
				timing := cfg.Timing()
				steps := []struct {
					what string
					took time.Duration
				}{
					{"the wait for the jobs' runs", e.jobs.stopLimit},
					{"the modules' stop", timing.Drain},
					{"the stop of the request host", natsapi.StopLimit},
					{"the stop of the transfer host", natsapi.StopLimit},
					{"the stop of the overflow host", natsapi.StopLimit},
					{"the end of the renewal in flight", timing.Renew()},
					{"the write of the released record", timing.Renew()},
					{"the fence of the release", natsapi.StopLimit},
				}
				var worst time.Duration
				var parts []string
				for _, s := range steps {
					worst += s.took
					parts = append(parts, fmt.Sprintf("%s %v", s.what, s.took))
				}
				if got := failedStartCleanUp(timing); got < worst {
					t.Fatalf("a failed start is given %v to clean up; its steps can take %v: %s", got, worst, strings.Join(parts, ", "))
				}
			})
		}
	}
}

// The time fx gives a stop covers the longest each of its steps can take,
// one after another: the wait for the jobs' runs, the release (the renewal
// in flight, then the released record, each cut off after a renewal
// period), the drain period, the kernel's three hosts and the fence of the
// release. It gave a drain, a lease and 30 s, and the stop's own deadline
// began before the jobs' wait: with a lease well over the drain (60 s and
// more), a stop whose job run was stuck could run past it, and its release
// past its own deadline, so the successor waited out the lease.
func TestAStopsBoundCoversItsLongestSteps(t *testing.T) {
	for _, lease := range []int{1, 5, 20, 60, 300} {
		for _, drain := range []int{0, 1, 60} {
			t.Run(fmt.Sprintf("lease%ds/drain%ds", lease, drain), func(t *testing.T) {
				cfg := leaseAndDrain(t, lease, drain)
				e := NewEngine(EngineParams{Config: cfg, Holder: domain.ThisProcess("test", ""), Logger: slog.New(slog.DiscardHandler)})
				timing := cfg.Timing()
				release := 2 * timing.Renew()
				if own := stopDeadline(timing); own < release+timing.Drain {
					t.Fatalf("a stop's own deadline is %v, after the jobs' wait; the release and the drain can take %v", own, release+timing.Drain)
				}
				worst := e.jobs.stopLimit + release + timing.Drain + 3*natsapi.StopLimit + natsapi.StopLimit
				if got := stopTimeout(timing); got < worst {
					t.Fatalf("fx gives a stop %v; the jobs' wait (%v), the release (%v), the drain (%v), the kernel's stop and the fence can take %v",
						got, e.jobs.stopLimit, release, timing.Drain, worst)
				}
			})
		}
	}
}

// leaseAndDrain is a serving engine's configuration with the lease and the
// drain period given, in seconds; nothing in it is opened.
func leaseAndDrain(t *testing.T, lease, drain int) *config.Config {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(fmt.Sprintf(
		"nats:\n  engine: {role: serve, lease_seconds: %d, drain_seconds: %d}\nhttp: {listen: off}\n", lease, drain)),
		func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
