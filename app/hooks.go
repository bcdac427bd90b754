package app

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/abi-engine/engine/domain"
)

// hooks are what the rest of the app hands the engine before it starts:
// who hears of its lease, its calls and its renewals, and what its stop
// drains beside its own calls. The engine's mu guards them.
type hooks struct {
	observers  []func(domain.Transition)
	onCalls    []func(service, op string, code int, took time.Duration)
	onRenewals []func(ok bool, took time.Duration)
	drains     []func(context.Context) error
}

// onCall hands a call's outcome to every observer of calls; nil when there
// is none.
func (h hooks) onCall() func(service, op string, code int, took time.Duration) {
	fs := h.onCalls
	if len(fs) == 0 {
		return nil
	}
	return func(service, op string, code int, took time.Duration) {
		for _, f := range fs {
			f(service, op, code, took)
		}
	}
}

// onRenewal hands a renewal's outcome to every observer of renewals; nil
// when there is none.
func (h hooks) onRenewal() func(ok bool, took time.Duration) {
	fs := h.onRenewals
	if len(fs) == 0 {
		return nil
	}
	return func(ok bool, took time.Duration) {
		for _, f := range fs {
			f(ok, took)
		}
	}
}

// Observe calls f with every transition of the lease, in order, from the
// goroutine that carries them out. Register before Start; f must not block.
func (e *Engine) Observe(f func(domain.Transition)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.hooks.observers = append(e.hooks.observers, f)
}

// ObserveCalls hands every kernel call's outcome to f, for metrics, and
// to every f registered before it, in order. Register before Start; f
// must not block.
func (e *Engine) ObserveCalls(f func(service, op string, code int, took time.Duration)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.hooks.onCalls = append(e.hooks.onCalls, f)
}

// ObserveRenewals hands every lease renewal's outcome to f, for metrics,
// and to every f registered before it, in order. Register before Start; f
// must not block.
func (e *Engine) ObserveRenewals(f func(ok bool, took time.Duration)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.hooks.onRenewals = append(e.hooks.onRenewals, f)
}

// DrainWith has the engine's stop run f beside the drain of its own calls,
// after the release and under the same deadline, and close its connections
// and backends only once f has returned. f is for work the engine's
// clients received that goes on through its facades: the HTTP API's
// requests in progress. f must return soon after its context ends.
// Register before Start.
func (e *Engine) DrainWith(f func(context.Context) error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.hooks.drains = append(e.hooks.drains, f)
}

// drain lets what the engine received finish until ctx ends, all at once:
// the kernel's calls and transfers, and what DrainWith registered.
func (e *Engine) drain(ctx context.Context) error {
	e.mu.Lock()
	k, drains := e.kernel, e.hooks.drains
	e.mu.Unlock()
	errs := make([]error, len(drains)+1)
	var wg sync.WaitGroup
	for i, f := range drains {
		wg.Go(func() { errs[i] = f(ctx) })
	}
	if k != nil {
		finished, err := k.drain(ctx)
		errs[len(drains)] = err
		if !finished {
			e.log.Warn("drain deadline passed; calls still running were cancelled", "drain", e.p.Config.Timing().Drain)
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}
