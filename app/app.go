package app

import (
	"fmt"
	"log/slog"
	"reflect"
	"runtime"
	"slices"

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
	// that run for good. Its lease record says so (domain.Holder.Command),
	// so an engine of role serve waits for its release.
	Transient bool
}

// AsModule provides a module constructor to the engine: f returns a type
// that implements Module, and may return an error after it. An f that is
// no function, that returns anything else, or that returns a nil module,
// fails the engine's graph with an error naming f: taken, a nil module
// panicked the engine's start.
//
// The modules start in the order their options were given to the engine
// (Graph's extra options, enginecmd.Options.Modules), and stop the last
// first. fx hands a value group over in an order it draws anew at each
// start, so the module goes into the group with a token of its option,
// and an Invoke, which fx runs in the order given, puts the token in the
// engine's order. The invokes of an fx.Module run before those of the
// options that hold it, so modules given inside one start before those
// given beside it.
func AsModule(f any) fx.Option {
	v := reflect.ValueOf(f)
	if f == nil || v.Kind() != reflect.Func || v.IsNil() {
		return fx.Error(fmt.Errorf("app.AsModule: a module constructor must be a function, got %T", f))
	}
	tok := new(moduleToken)
	ctor, err := givenBy(v, tok)
	if err != nil {
		return fx.Error(err)
	}
	return fx.Options(
		fx.Provide(fx.Annotate(ctor, fx.ResultTags(`group:"given-modules"`))),
		fx.Invoke(func(o *moduleOrder) { o.tokens = append(o.tokens, tok) }),
	)
}

// moduleToken stands for one AsModule option. It is not empty, so that
// each is a pointer of its own.
type moduleToken struct{ _ byte }

// givenModule is a module AsModule provided, with its option's token.
type givenModule struct {
	token  *moduleToken
	module Module
}

// moduleOrder is the tokens of one graph's AsModule options, in the order
// the options were given.
type moduleOrder struct{ tokens []*moduleToken }

// arrange puts given in o's order; a module whose token o lacks, which
// cannot happen through AsModule, comes after.
func (o *moduleOrder) arrange(given []givenModule) []Module {
	out := make([]Module, 0, len(given))
	used := make([]bool, len(given))
	for _, tok := range o.tokens {
		for i, g := range given {
			if !used[i] && g.token == tok {
				used[i] = true
				out = append(out, g.module)
				break
			}
		}
	}
	for i, g := range given {
		if !used[i] {
			out = append(out, g.module)
		}
	}
	return out
}

var (
	errorType  = reflect.TypeFor[error]()
	moduleType = reflect.TypeFor[Module]()
	givenType  = reflect.TypeFor[givenModule]()
)

// givenBy returns constructor f, of a module or of a module and an error,
// as one that returns the module with tok, or an error naming f in place
// of a nil module.
func givenBy(f reflect.Value, tok *moduleToken) (any, error) {
	t := f.Type()
	name := "?"
	if fn := runtime.FuncForPC(f.Pointer()); fn != nil {
		name = fn.Name()
	}
	withErr := t.NumOut() == 2 && t.Out(1) == errorType
	if (t.NumOut() != 1 && !withErr) || !t.Out(0).Implements(moduleType) {
		return nil, fmt.Errorf("app.AsModule: module constructor %s (%s) must return a Module, and may return an error after it", name, t)
	}
	in := make([]reflect.Type, t.NumIn())
	for i := range in {
		in[i] = t.In(i)
	}
	checked := reflect.FuncOf(in, []reflect.Type{givenType, errorType}, t.IsVariadic())
	return reflect.MakeFunc(checked, func(args []reflect.Value) []reflect.Value {
		var out []reflect.Value
		if t.IsVariadic() {
			out = f.CallSlice(args)
		} else {
			out = f.Call(args)
		}
		err := reflect.Zero(errorType)
		if withErr {
			err = out[1]
		}
		var m Module
		if isNil(out[0]) {
			if err.IsNil() {
				err = reflect.ValueOf(fmt.Errorf("module constructor %s returned a nil module (%s)", name, t.Out(0))).Convert(errorType)
			}
		} else {
			m = out[0].Interface().(Module)
		}
		return []reflect.Value{reflect.ValueOf(givenModule{token: tok, module: m}), err}
	}).Interface(), nil
}

// isNil reports whether v is nil: a nil interface, or a nil pointer, map,
// slice, channel or function.
func isNil(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Interface, reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func:
		return v.IsNil()
	}
	return false
}

// nilModule says which module of modules is nil, if one is: a program
// that provides its modules to the group without AsModule, or builds an
// engine with NewEngine, is told so at the start rather than panic in it.
func nilModule(modules []Module) error {
	for i, m := range modules {
		if m == nil || isNil(reflect.ValueOf(m)) {
			return fmt.Errorf("module %d of %d is nil (%T): its constructor returned no module", i+1, len(modules), m)
		}
	}
	return nil
}

// engineIn is what the engine's constructor takes from the graph.
type engineIn struct {
	fx.In
	Config  *config.Config
	Holder  domain.Holder
	Logger  *slog.Logger
	Storage []storage.Built
	Order   *moduleOrder
	Given   []givenModule `group:"given-modules"`
	// Modules are the activity log and any module put in the group
	// without AsModule, in an order fx draws anew at each start.
	Modules    []Module `group:"modules"`
	Options    Options
	Shutdowner fx.Shutdowner
}

// newEngine makes the engine. Its modules are known only once fx has run
// every invoke, AsModule's among them, which may come after the engine is
// made: the engine takes them at its start (graphModules). The activity
// log comes first, then the modules given with AsModule, in their order,
// then any put in the group without it.
func newEngine(in engineIn) *Engine {
	e := NewEngine(EngineParams{
		Config: in.Config, Holder: in.Holder, Logger: in.Logger, Storage: in.Storage,
		Embed:    in.Options.Embed,
		Shutdown: func(code int) { _ = in.Shutdowner.Shutdown(fx.ExitCode(code)) },
	})
	e.graphModules = func() []Module { return activityFirst(slices.Concat(in.Order.arrange(in.Given), in.Modules)) }
	return e
}

// activityFirst puts the activity log before the other modules, so it
// starts first and stops last: fx hands a group's values over in an order
// it draws anew at each start, and a log that came after a module whose
// start failed never started, and kept nothing of the engine's hold of the
// lease, nor of its release.
func activityFirst(modules []Module) []Module {
	out := slices.Clone(modules)
	slices.SortStableFunc(out, func(a, b Module) int {
		_, aLog := a.(*Activity)
		_, bLog := b.(*Activity)
		switch {
		case aLog && !bLog:
			return -1
		case bLog && !aLog:
			return 1
		}
		return 0
	})
	return out
}

// Graph is the engine's fx graph without its logger and timeouts: the
// configuration, the shared-backend check (an Invoke, so a refused rollout
// fails fx.New before anything opens), the check of the engine's modules
// (a nil one, or one that needs a service switched off, fails fx.New the
// same way), the HTTP API's port, the engine's lifecycle, then the HTTP
// API and the activity log. Extra options, such as modules, are added to
// it.
//
// fx runs the invokes of every fx.Module before those of the graph that
// holds it, in the order the modules were given: each check is a module of
// its own, given first, so they run before the invokes of any module a
// program adds, which may open files and connections of their own.
func Graph(o Options, extra ...fx.Option) fx.Option {
	me := domain.ThisProcess(o.Version, o.Config.NATS.Engine.RolloutID)
	me.Command = o.Transient
	return fx.Options(
		fx.Supply(o, o.Config, me, o.Logger.With("instance", me.InstanceID)),
		fx.Provide(BuildStorage, newEngine, func() *moduleOrder { return &moduleOrder{} }),
		fx.Module("shared-backend-check", fx.Invoke(CheckStorage)),
		fx.Module("module-check", fx.Invoke(func(e *Engine) error { return e.checkModules() })),
		bindHTTP(),
		fx.Invoke(func(lc fx.Lifecycle, e *Engine) { lc.Append(fx.StartStopHook(e.Start, e.Stop)) }),
		callerCheckWarning(),
		httpAPI(),
		activityLog(),
		extraOptions(extra),
	)
}

// extraOptions are extra as one option; a nil one among them, such as a
// nil entry in enginecmd.Options.Modules, is an error naming its place,
// where fx would panic on it.
func extraOptions(extra []fx.Option) fx.Option {
	for i, o := range extra {
		if o == nil {
			return fx.Error(fmt.Errorf("option %d of the %d added to the engine (modules and the like) is nil", i+1, len(extra)))
		}
	}
	return fx.Options(extra...)
}

// New builds the engine's fx application.
func New(o Options, extra ...fx.Option) *fx.App {
	timing := o.Config.Timing()
	return fx.New(
		Graph(o, extra...),
		// The engine bounds its start itself (startLimit) and, past it,
		// stops what it started and releases the lease: fx waits for that,
		// since a process that exited on fx's timeout left the lease held.
		// A stop waits for the jobs' runs, releases, and drains for the
		// drain period (stopTimeout).
		fx.StartTimeout(startLimit(domain.MaxLease)+failedStartCleanUp(timing)),
		fx.StopTimeout(stopTimeout(timing)),
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
