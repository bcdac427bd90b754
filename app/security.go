package app

import (
	"context"
	"log/slog"

	"go.uber.org/fx"

	"github.com/abi-engine/engine/domain"
)

// warnUncheckedCallers says once, when an engine that may serve has
// started, that its services take calls from anyone on the account: with
// nats.caller_secret left out, that is the deployment's choice, and the
// operator should see it was made.
func warnUncheckedCallers(o Options, log *slog.Logger, e *Engine) func(context.Context) error {
	return func(context.Context) error {
		if o.Config.NATS.CallerSecret != "" || o.Transient || e.Outcome() == domain.OutcomeClient {
			return nil
		}
		log.Warn("callers are not checked: nats.caller_secret is not set, so every user of the NATS account may call every service but secrets (see docs/security.md)")
		return nil
	}
}

// callerCheckWarning appends the warning after the engine's start hook.
func callerCheckWarning() fx.Option {
	return fx.Invoke(func(lc fx.Lifecycle, o Options, log *slog.Logger, e *Engine) {
		lc.Append(fx.Hook{OnStart: warnUncheckedCallers(o, log, e)})
	})
}
