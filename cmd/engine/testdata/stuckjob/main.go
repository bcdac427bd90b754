// Command stuckjob is the engine command with one module, whose job's run
// never returns and does not heed its cancellation: the tests of
// cmd/engine build it to see what a real engine process does at its stop
// with such a run in progress.
package main

import (
	"context"
	"time"

	"go.uber.org/fx"

	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/enginecmd"
)

// stuck is the module: its job's first run logs that it began, then waits
// on nothing that ever comes.
type stuck struct{}

func (stuck) Name() string               { return "stuck" }
func (stuck) Needs() []string            { return nil }
func (stuck) Stop(context.Context) error { return nil }
func (stuck) Start(_ context.Context, env app.ModuleEnv) error {
	return env.Jobs.Register(app.Job{Name: "stuck", Every: 10 * time.Millisecond, Run: func(context.Context) error {
		env.Logger.Info("the stuck job's run began; it never returns")
		select {}
	}})
}

func main() {
	enginecmd.Main(enginecmd.Options{
		Version: "dev",
		Modules: []fx.Option{app.AsModule(func() app.Module { return stuck{} })},
	})
}
