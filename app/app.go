package app

import (
	"log/slog"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	"github.com/abi-engine/engine/adapters/secondary/storage"
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
	// Transient: the engine lives for one command, such as `engine kv
	// get`, and leaves the operator's start-time warnings to the engines
	// that run for good.
	Transient bool
}

// AsModule provides a module constructor to the engine: f returns a type
// that implements Module.
func AsModule(f any) fx.Option {
	return fx.Provide(fx.Annotate(f, fx.As(new(Module)), fx.ResultTags(`group:"modules"`)))
}

// engineIn is what the engine's constructor takes from the graph.
type engineIn struct {
	fx.In
	Config     *config.Config
	Holder     domain.Holder
	Logger     *slog.Logger
	Storage    []storage.Built
	Conns      *storageConns
	Modules    []Module `group:"modules"`
	Options    Options
	Shutdowner fx.Shutdowner
}

// newEngine makes the engine and hands its closed handler and its logger
// to the connections its stores will dial, so a store's connection closing
// for good stops the engine, and what the broker refuses it is logged, as
// for the engine's own connections.
func newEngine(in engineIn) *Engine {
	e := NewEngine(EngineParams{
		Config: in.Config, Holder: in.Holder, Logger: in.Logger, Storage: in.Storage,
		Modules: in.Modules, Embed: in.Options.Embed,
		Shutdown: func(code int) { _ = in.Shutdowner.Shutdown(fx.ExitCode(code)) },
	})
	in.Conns.closed, in.Conns.log = e.connectionClosed, e.log
	return e
}

// engineStorage is BuildStorage for the engine of the graph: its stores'
// connections report to the engine (newEngine).
func engineStorage(cfg *config.Config) (*storageConns, []storage.Built, error) {
	conns := &storageConns{}
	built, err := buildStorage(cfg, conns)
	return conns, built, err
}

// Graph is the engine's fx graph without its logger and timeouts: the
// configuration, the shared-backend check (an Invoke, so a refused rollout
// fails fx.New before anything opens), the HTTP API's port, the engine's
// lifecycle, then the HTTP API and the activity log. Extra options, such as modules, are added
// to it.
//
// fx runs the invokes of every fx.Module before those of the graph that
// holds it, in the order the modules were given: the check is a module of
// its own, given first, so it runs before the invokes of any module a
// program adds, which may open files and connections of their own.
func Graph(o Options, extra ...fx.Option) fx.Option {
	me := domain.ThisProcess(o.Version, o.Config.NATS.Engine.RolloutID)
	return fx.Options(
		fx.Supply(o, o.Config, me, o.Logger.With("instance", me.InstanceID)),
		fx.Provide(engineStorage, newEngine),
		fx.Module("shared-backend-check", fx.Invoke(CheckStorage)),
		bindHTTP(),
		fx.Invoke(func(lc fx.Lifecycle, e *Engine) { lc.Append(fx.StartStopHook(e.Start, e.Stop)) }),
		callerCheckWarning(),
		httpAPI(),
		activityLog(),
		fx.Options(extra...),
	)
}

// New builds the engine's fx application.
func New(o Options, extra ...fx.Option) *fx.App {
	timing := o.Config.Timing()
	return fx.New(
		Graph(o, extra...),
		// The engine bounds its start itself (startLimit) and, past it,
		// stops what it started and releases the lease: fx waits for that,
		// since a process that exited on fx's timeout left the lease held.
		// A stop may drain for the drain period and then release.
		fx.StartTimeout(startLimit(domain.MaxLease)+failedStartCleanUp(timing)),
		fx.StopTimeout(timing.Drain+timing.Lease+30*time.Second),
		fx.WithLogger(func(log *slog.Logger) fxevent.Logger {
			// fx's own account of the graph is for debugging; failures reach
			// the command as errors and are reported there once.
			l := &fxevent.SlogLogger{Logger: log}
			l.UseLogLevel(slog.LevelDebug)
			l.UseErrorLevel(slog.LevelDebug)
			return l
		}),
	)
}
