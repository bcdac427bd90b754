// Command engine runs an abi-engine: with no flags, a single engine on
// embedded defaults (a nats-server in the process when none answers on
// 127.0.0.1:4222, every service on local files under ./.engine).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/app/config"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

// run is the whole command; it returns the exit code: 0 ok, 1 error, 2 usage.
func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("engine", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "engine.yaml to load (none: embedded defaults)")
	dataDir := fs.String("data-dir", "", "directory for local data, overriding data_dir")
	natsURL := fs.String("nats-url", "", "NATS URL, overriding nats.url and NATS_URL")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "engine: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	cfg, err := config.Load(*configPath)
	if err != nil {
		fmt.Fprintf(stderr, "engine: %v\n", err)
		return 1
	}
	if *dataDir != "" {
		cfg.DataDir = *dataDir
	}
	if *natsURL != "" {
		cfg.NATS.URL = *natsURL
	}
	embed := *configPath == "" && *natsURL == "" && os.Getenv("NATS_URL") == ""

	a := app.New(app.Options{Config: cfg, Version: version, Embed: embed, Logger: log})
	if err := a.Err(); err != nil {
		fmt.Fprintf(stderr, "engine: %v\n", err)
		return 1
	}
	// Signals are ours from before the start, so one that arrives while the
	// engine claims the lease ends the claim instead of killing the process.
	signalled, stopSignals := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stopSignals()
	startCtx, cancel := context.WithTimeout(signalled, a.StartTimeout())
	defer cancel()
	if err := a.Start(startCtx); err != nil {
		fmt.Fprintf(stderr, "engine: %v\n", err)
		return 1
	}
	code := 0
	select {
	case <-signalled.Done():
		log.Info("stopping on a signal")
	case sig := <-a.Wait():
		code = sig.ExitCode
		log.Info("stopping", "exit_code", code)
	}
	stopCtx, cancelStop := context.WithTimeout(context.Background(), a.StopTimeout()+5*time.Second)
	defer cancelStop()
	if err := a.Stop(stopCtx); err != nil {
		fmt.Fprintf(stderr, "engine: %v\n", err)
		return 1
	}
	return code
}
