package app

import (
	"log/slog"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	"github.com/abi-engine/engine/app/config"
	"github.com/abi-engine/engine/domain"
)

// Options are what the command decides before the engine is built.
type Options struct {
	Config  *config.Config
	Version string
	// Embed: see EngineParams.Embed.
	Embed  bool
	Logger *slog.Logger
}

// New builds the engine's fx application. Every log line carries the
// engine's instance id.
func New(o Options) *fx.App {
	me := domain.ThisProcess(o.Version, o.Config.NATS.Engine.RolloutID)
	log := o.Logger.With("instance", me.InstanceID)
	timing := o.Config.Timing()
	return fx.New(
		fx.Supply(EngineParams{Config: o.Config, Holder: me, Logger: log, Embed: o.Embed}),
		Module,
		// A claim may watch the holder for a whole lease; a stop may drain
		// for the drain period and then release.
		fx.StartTimeout(timing.Lease+30*time.Second),
		fx.StopTimeout(timing.Drain+timing.Lease+30*time.Second),
		fx.WithLogger(func() fxevent.Logger {
			l := &fxevent.SlogLogger{Logger: log}
			l.UseLogLevel(slog.LevelDebug)
			return l
		}),
	)
}
