// Package enginecmd is the engine command: serve, status, the client
// commands (kv, obj, doc, history) and config check, as cmd/engine runs
// them. A team's own engine is a main that registers its adapters and
// modules and calls Main:
//
//	func main() {
//		storage.Register(ports.ServiceKeyValue, "redis", redis.Open)
//		enginecmd.Main(enginecmd.Options{
//			Modules: []fx.Option{app.AsModule(billing.New)},
//		})
//	}
//
// Its adapters are then chosen in engine.yaml like the built-in ones
// (services: {keyvalue: {adapter: redis, config: {...}}}), decoded
// strictly, masked by config check and judged by the shared-backend check.
//
//	engine [serve] [--config engine.yaml] [--data-dir DIR] [--nats-url URL]
//	engine status
//	engine kv get|set|del|ls
//	engine obj put|get|ls|rm
//	engine doc get|put|del|find
//	engine history
//	engine config check [--config engine.yaml]
//
// With no flags it runs a single engine on embedded defaults: a nats-server
// in the process when none answers on 127.0.0.1:4222, and every service on
// local files under ./.engine. The client commands (kv, obj, doc, history)
// run an engine of role auto in the process: a client of the engine that
// serves, or, when none does, serving for the length of the command.
package enginecmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"go.uber.org/dig"
	"go.uber.org/fx"

	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/app/config"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/heapfloor"
)

// StopSlack is what a command gives its engine's stop beyond the engine's
// own bound on it (app.App.StopTimeout), for the process to exit.
const StopSlack = 5 * time.Second

// usage lists the commands.
const usage = `usage: engine [command] [flags]

  serve                        run an engine (the default command)
  status                       the engine that serves, read from the lease
  kv get|set|del|ls            the keyvalue service
  obj put|get|ls|rm            the object storage service
  doc get|put|del|find         the document service
  history                      the activity log, newest first
  config check                 validate a configuration and show where data lives
  version                      the release this engine is
  help [COMMAND]               this list, or a command's usage

Run "engine COMMAND -h" for a command's flags.
`

// Exit codes: 0 ok, 1 error, 2 usage.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// Options extend the engine command. The zero value is the command as
// cmd/engine builds it.
type Options struct {
	// Version is the release the engine reports in the lease, its logs and
	// status; "dev" when empty.
	Version string
	// Modules are added to every engine the command starts, serving or
	// for the length of a client command: app.AsModule(NewMyModule), or
	// any other fx option the engine's graph should carry. The modules
	// given with app.AsModule start in the order given here and stop the
	// last first; one an option puts straight into the fx group "modules"
	// starts after them, in an order fx draws anew at each start.
	Modules []fx.Option
}

// Main runs the command on the process's arguments and exits with its
// code: 0 done, 1 failed, 2 a usage error.
func Main(o Options) { os.Exit(Run(os.Args[1:], os.Stdout, os.Stderr, o)) }

// Run is the whole command with args (without the program's name); it
// returns the exit code. Storage adapters must be registered before it is
// called.
func Run(args []string, stdout, stderr io.Writer, o Options) int {
	if o.Version == "" {
		o.Version = "dev"
	}
	// A write to a stdout or stderr whose reader has gone (engine kv ls |
	// head -1, or an engine whose log pipe closed) fails with EPIPE rather
	// than kill the process with SIGPIPE: killed, an engine, or a command
	// serving for its length, held the lease until it ran out, and no
	// engine served the account meanwhile. A command reports the failed
	// write and stops as after any error; an engine serves on, its lost
	// log lines dropped.
	pipes := make(chan os.Signal, 1)
	signal.Notify(pipes, syscall.SIGPIPE)
	defer signal.Stop(pipes)
	return (&command{o: o}).run(args, stdout, stderr)
}

// command is one run of the command, with its options.
type command struct{ o Options }

// newApp builds an engine with the command's modules.
func (c *command) newApp(o app.Options, extra ...fx.Option) *fx.App {
	o.Version = c.o.Version
	return app.New(o, append(slices.Clone(c.o.Modules), extra...)...)
}

// run dispatches to the command named by the first argument.
func (c *command) run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		// Help and version asked as flags, the way most tools take them,
		// answer for the whole command rather than for serve alone.
		switch args[0] {
		case "-h", "-help", "--help":
			args = append([]string{"help"}, args[1:]...)
		case "-version", "--version":
			args = append([]string{"version"}, args[1:]...)
		}
	}
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		switch args[0] {
		case "serve":
			return c.serve(args[1:], stderr)
		case "config":
			return c.configCommand(args[1:], stdout, stderr)
		case "status":
			return c.statusCommand(args[1:], stdout, stderr)
		case "kv":
			return c.kvCommand(args[1:], stdout, stderr)
		case "obj":
			return c.objCommand(args[1:], stdout, stderr)
		case "doc":
			return c.docCommand(args[1:], stdout, stderr)
		case "history":
			return c.historyCommand(args[1:], stdout, stderr)
		case "help":
			return c.help(args[1:], stdout, stderr)
		case "version":
			if len(args) > 1 {
				fmt.Fprintf(stderr, "engine version: unexpected argument %q\n", args[1])
				return exitUsage
			}
			fmt.Fprintf(stdout, "engine %s\n", c.o.Version)
			return exitOK
		}
		fmt.Fprintf(stderr, "engine: unknown command %q\n%s", args[0], usage)
		return exitUsage
	}
	return c.serve(args, stderr)
}

// help prints the list of commands, or with one argument the usage of the
// command it names: `engine help kv` lists kv's commands, `engine help
// status` gives status's flags, as `engine status -h` does. Anything else
// after help is a usage error, not a list that seems to answer it.
func (c *command) help(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		fmt.Fprint(stdout, usage)
		return exitOK
	case len(args) > 1:
		fmt.Fprintf(stderr, "engine help: unexpected argument %q\n", args[1])
		return exitUsage
	}
	switch args[0] {
	case "kv":
		fmt.Fprint(stdout, kvUsage+subUsage("kv"))
	case "obj":
		fmt.Fprint(stdout, objUsage+subUsage("obj"))
	case "doc":
		fmt.Fprint(stdout, docUsage+subUsage("doc"))
	case "config":
		fmt.Fprintln(stdout, configUsage)
	case "serve", "status", "history":
		return c.run([]string{args[0], "-h"}, stdout, stderr)
	case "help", "version":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "engine help: unknown command %q\n%s", args[0], usage)
		return exitUsage
	}
	return exitOK
}

// subUsage points from a command's list of subcommands to their flags.
func subUsage(name string) string {
	return fmt.Sprintf("\nRun \"engine %s COMMAND -h\" for a command's flags.\n", name)
}

// parse parses flags; ok is false with the exit code when the command
// should stop (help asked, or a usage error).
func parse(fs *flag.FlagSet, args []string, stderr io.Writer) (code int, ok bool) {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "engine: unexpected argument %q\n", fs.Arg(0))
		return exitUsage, false
	}
	return 0, true
}

func (c *command) serve(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("engine serve", flag.ContinueOnError)
	configPath := fs.String("config", "", "engine.yaml to load (none: embedded defaults)")
	dataDir := fs.String("data-dir", "", "directory for local data, overriding data_dir")
	natsURL := fs.String("nats-url", "", "NATS URL, overriding nats.url and NATS_URL")
	if code, ok := parse(fs, args, stderr); !ok {
		return code
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	cfg, err := config.Load(*configPath)
	if err != nil {
		return fail(stderr, err)
	}
	if *dataDir != "" {
		cfg.DataDir = *dataDir
		cfg.SetBy("data_dir", "--data-dir")
	}
	if *natsURL != "" {
		cfg.NATS.URL = *natsURL
		cfg.SetBy("nats.url", "--nats-url")
	}
	if err := cfg.Validate(); err != nil {
		return fail(stderr, err)
	}
	embed := *configPath == "" && *natsURL == "" && os.Getenv("NATS_URL") == ""
	if os.Getenv("GOGC") == "" {
		// A server of small calls keeps little live: without a floor the
		// collector runs many times a second (docs/performance.md).
		floor := heapfloor.Keep(heapfloor.Default)
		defer floor.Stop()
		log.Info("the garbage collector waits for the heap to reach its floor; set GOGC to choose otherwise",
			"floor_mib", heapfloor.Default>>20, "gc_percent", floor.Percent())
	}

	var eng *app.Engine
	asked := make(chan struct{}, 1)
	a := c.newApp(app.Options{Config: cfg, Embed: embed, Logger: log}, fx.Populate(&eng),
		fx.Decorate(func(s fx.Shutdowner) fx.Shutdowner { return askingShutdowner{s, asked} }))
	if err := a.Err(); err != nil {
		return fail(stderr, dig.RootCause(err))
	}
	// Signals are ours from before the start. One that arrives while the
	// engine claims the lease or opens what its claim decided ends its start
	// instead of killing the process: the engine stops what it started and
	// releases a lease it took before its start returns, and fx waits for
	// that, since its own context is not cancelled (with it cancelled, fx
	// returned at once and the process exited holding the lease). A second
	// one while that clean-up runs, which may wait drain_seconds on a
	// module's stop, ends the process at once, as during a stop. One that
	// arrives once the engine has started stops it as usual.
	// SIGHUP too: a closed terminal or a lost ssh session would otherwise
	// kill the engine holding the lease, neither released nor drained.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, stopSignals()...)
	defer signal.Stop(signals)
	startCtx, cancel := context.WithTimeout(context.Background(), a.StartTimeout())
	defer cancel()
	startDone := make(chan error, 1)
	go func() { startDone <- a.Start(startCtx) }()
	stopAsked := false
	for waiting := true; waiting; {
		select {
		case err = <-startDone:
			waiting = false
		case sig := <-signals:
			if !stopAsked {
				stopAsked = true
				eng.Interrupt()
				continue
			}
			log.Warn("another signal while the start stops; exiting without waiting for it to finish", "signal", sig.String())
			return exitError
		}
	}
	if err != nil {
		if stopAsked {
			log.Info("stopped by a signal while starting")
			return exitOK
		}
		return fail(stderr, dig.RootCause(err))
	}
	code := exitOK
	if stopAsked {
		log.Info("stopping on a signal")
	} else {
		// A stop the process asked for itself is read from fx only once
		// it was asked: fx's Wait hears SIGINT and SIGTERM as well, so a
		// select on both heard one signal twice, and when fx's copy won,
		// the command took the other for a second signal and exited 1 at
		// once, neither drained nor released.
		select {
		case <-signals:
			log.Info("stopping on a signal")
		case <-asked:
			code = (<-a.Wait()).ExitCode
			log.Info("stopping", "exit_code", code)
		}
	}
	stopCtx, cancelStop := context.WithTimeout(context.Background(), a.StopTimeout()+StopSlack)
	defer cancelStop()
	stopped := make(chan error, 1)
	go func() { stopped <- a.Stop(stopCtx) }()
	// A stop may wait a long time: for jobs to finish, then for the calls
	// and transfers received to end, up to drain_seconds. An operator who
	// signals again does not want to wait: the process exits at once, as
	// after a crash, and a standby takes over after the release or within a
	// lease. Before, further signals were ignored until the drain ended.
	select {
	case err := <-stopped:
		if err != nil {
			return fail(stderr, dig.RootCause(err))
		}
		return code
	case sig := <-signals:
		log.Warn("another signal while stopping; exiting without waiting for the stop to finish", "signal", sig.String())
		return exitError
	}
}

// askingShutdowner is the graph's fx.Shutdowner in serve: a shutdown asked
// by the engine (its NATS connection closed for good) or by a module is
// passed to fx, which keeps its exit code for Wait, and then told on asked.
// The command reads fx's Wait only after that, never beside its own signal
// handler: fx listens to SIGINT and SIGTERM from the first call to Wait.
type askingShutdowner struct {
	fx.Shutdowner
	asked chan<- struct{}
}

func (s askingShutdowner) Shutdown(opts ...fx.ShutdownOption) error {
	err := s.Shutdowner.Shutdown(opts...)
	select {
	case s.asked <- struct{}{}:
	default:
	}
	return err
}

// fileChecker is an adapter's configuration whose store reads a file
// whole as it opens, as dotenv does its .env file: config check reads it
// too, so a file the store would refuse is found before an engine serves,
// not once it holds the lease. A client opens no store, so its check does
// not read the file, which may be on the serving host only.
type fileChecker interface{ CheckFile() error }

const configUsage = "usage: engine config check [--config engine.yaml]"

// configCommand: `engine config check` validates a configuration and prints
// it resolved, secrets masked, with where each service keeps its data.
func (c *command) configCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprintln(stderr, configUsage)
		return exitUsage
	}
	fs := flag.NewFlagSet("engine config check", flag.ContinueOnError)
	configPath := fs.String("config", "", "engine.yaml to check (none: the defaults)")
	if code, ok := parse(fs, args[1:], stderr); !ok {
		return code
	}
	cfg, err := config.Load(*configPath)
	if err != nil {
		return fail(stderr, err)
	}
	built, err := app.BuildStorage(cfg)
	if err != nil {
		return fail(stderr, err)
	}
	if err := app.CheckStorage(cfg, built); err != nil {
		return fail(stderr, err)
	}
	if cfg.Role() != domain.RoleClient {
		for _, b := range built {
			if f, ok := b.Declaration.Storage.(fileChecker); ok {
				if err := f.CheckFile(); err != nil {
					return fail(stderr, err)
				}
			}
		}
	}
	// The engine's graph, built and not started, checks the program's
	// modules as an engine's start would: one that needs a service this
	// configuration switches off is refused here too. Building it runs
	// the modules' constructors, and opens nothing of the engine's.
	if err := c.newApp(app.Options{Config: cfg, Logger: slog.New(slog.DiscardHandler)}).Err(); err != nil {
		return fail(stderr, dig.RootCause(err))
	}
	out, err := cfg.Masked().YAML()
	if err != nil {
		return fail(stderr, err)
	}
	fmt.Fprintf(stdout, "# configuration is valid\n%s# where each service keeps its data\n", out)
	for _, b := range built {
		d := b.Declaration
		where := "shared: every engine reaches it"
		switch {
		case d.Off:
			where = "switched off"
		case d.Storage != nil && d.Storage.LocalStorage() != "":
			where = "on this host: " + d.Storage.LocalStorage()
		case d.Storage != nil:
			if s, ok := d.Storage.(interface{ Describe() string }); ok {
				where = "shared: " + s.Describe()
			}
		}
		fmt.Fprintf(stdout, "#   %s (%s): %s\n", d.Service, d.Adapter, where)
	}
	fmt.Fprintln(stdout, "# who may call (docs/security.md)")
	for _, g := range cfg.Guards() {
		fmt.Fprintf(stdout, "#   %s\n", g)
	}
	return exitOK
}

// stopSignals are the signals that stop an engine cleanly: SIGINT, SIGTERM
// and SIGHUP, unless the engine was started with SIGHUP ignored (nohup, or
// a shell's trap "" HUP) to outlive its terminal. Notify would install a
// handler for it and so un-ignore it.
func stopSignals() []os.Signal {
	sigs := []os.Signal{syscall.SIGINT, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	return sigs
}
