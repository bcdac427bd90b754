package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"sync"

	"github.com/abi-engine/engine/app/config"
	"github.com/abi-engine/engine/ports"
)

// moduleHost starts the engine's modules, in order, and stops those that
// started, the last first. Each call into a module is guarded, and bounded
// by its context: a module's panic, or a Start or a Stop that does not
// return, must not keep the engine from releasing its lease.
type moduleHost struct {
	modules []Module
	cfg     *config.Config
	log     *slog.Logger

	mu      sync.Mutex
	started []Module
}

func newModuleHost(modules []Module, cfg *config.Config, log *slog.Logger) *moduleHost {
	return &moduleHost{modules: modules, cfg: cfg, log: log}
}

// checkNeeds refuses a module that needs a service the configuration
// does not give the modules, or a name that is no service. What the
// modules get depends on the configuration alone (Offers), so the engine
// asks before it opens anything or touches the lease.
func (h *moduleHost) checkNeeds() error {
	for _, m := range h.modules {
		var needs []string
		if err := h.guard(m, "needs", func() error { needs = m.Needs(); return nil }); err != nil {
			return fmt.Errorf("module %s: %w", moduleName(m), err)
		}
		for _, need := range needs {
			if Offers(h.cfg, need) {
				continue
			}
			// A name that is no service is a mistake in the module, not
			// a service the operator switched off.
			if !slices.Contains(serviceNames, need) {
				return fmt.Errorf("module %s needs %q, which is no service: want one of %s", moduleName(m), need, strings.Join(serviceNames, ", "))
			}
			// Secrets are missing when no source is on, or when callers do
			// not sign; the error names the one that holds, so the operator
			// is not sent to set a caller secret that is set already.
			if need == ports.ServiceSecret && secretsOn(h.cfg) {
				return fmt.Errorf("module %s needs the secret service, which is served only with nats.caller_secret set", moduleName(m))
			}
			return fmt.Errorf("module %s needs the %s service, which is switched off", moduleName(m), need)
		}
	}
	return nil
}

// start starts the modules one after another, and stops at the first that
// fails. Their needs were checked before the engine opened anything
// (checkNeeds).
func (h *moduleHost) start(ctx context.Context, env ModuleEnv) error {
	for _, m := range h.modules {
		if err := h.startOne(ctx, m, env); err != nil {
			return fmt.Errorf("start module %s: %w", moduleName(m), err)
		}
		h.mu.Lock()
		h.started = append(h.started, m)
		h.mu.Unlock()
	}
	return nil
}

// startOne starts m, and returns when it has started or when ctx ends,
// whichever comes first: a Start that does not heed its context would hold
// the engine's start past its limit and past an interrupt, holding the
// lease, until the process ended on fx's timeout. A Start the engine gave
// up on that returns without an error later is stopped then.
func (h *moduleHost) startOne(ctx context.Context, m Module, env ModuleEnv) error {
	done := make(chan error, 1)
	go func() { done <- h.guard(m, "start", func() error { return m.Start(ctx, env) }) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	select {
	case err := <-done:
		return err
	default:
	}
	h.log.Error("a module's start did not return in time; the engine's start fails without it", "module", moduleName(m))
	go func() {
		if err := <-done; err == nil {
			sctx, cancel := context.WithTimeout(context.Background(), h.cfg.Timing().Drain)
			defer cancel()
			if err := h.guard(m, "stop", func() error { return m.Stop(sctx) }); err != nil {
				h.log.Warn("stopping a module that started late", "module", moduleName(m), "err", err)
			}
		}
	}()
	return fmt.Errorf("it did not return within the start's time: %w", ctx.Err())
}

// stop stops the modules started, the last first, once each, and returns
// when they have stopped or when ctx ends, whichever comes first. A module
// whose Stop does not heed its context is left to return on its own, and
// those started before it are stopped after it, still the last first: the
// engine's stop goes on and closes what is left. Waiting for it held up a
// stop for good, and the clean-up of a failed start before its release, so
// the process ended on fx's timeout holding the lease.
func (h *moduleHost) stop(ctx context.Context) error {
	h.mu.Lock()
	started := h.started
	h.started = nil
	h.mu.Unlock()
	var (
		mu       sync.Mutex
		stopping string // the module whose Stop runs
		errs     []error
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, m := range slices.Backward(started) {
			mu.Lock()
			stopping = moduleName(m)
			mu.Unlock()
			if err := h.guard(m, "stop", func() error { return m.Stop(ctx) }); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("stop module %s: %w", moduleName(m), err))
				mu.Unlock()
			}
		}
	}()
	select {
	case <-done:
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		select {
		case <-done:
		default:
			h.log.Error("a module's stop did not return in time; the engine stops without it", "module", stopping)
			errs = append(errs, fmt.Errorf("stop module %s: it did not return within the stop's time: %w", stopping, ctx.Err()))
		}
		return errors.Join(slices.Clone(errs)...)
	}
	return errors.Join(errs...)
}

// guard runs f, a call into module m, and makes a panic in it that call's
// error, logged with its stack. A module's start and stop run in the
// engine's start and stop: a panic there ended the process at once,
// holding the lease, with no release, no drain and no stop of the other
// modules, and no engine served until the lease ran out.
func (h *moduleHost) guard(m Module, what string, f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			h.log.Error("module panicked", "module", moduleName(m), "in", what, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = fmt.Errorf("%s panicked: %v", what, p)
		}
	}()
	return f()
}

// moduleName is m's name, or its type when its Name panics.
func moduleName(m Module) (name string) {
	defer func() {
		if recover() != nil {
			name = fmt.Sprintf("%T", m)
		}
	}()
	return m.Name()
}
