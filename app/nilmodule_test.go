package app_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/dig"
	"go.uber.org/fx"

	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/internal/natstest"
)

// A module constructor that returns nil, a constructor that is nil, or a
// nil option among those added to the engine fails the engine with an
// error that says which, and nothing panics. Before, a nil module panicked
// the engine's start once it held the lease, and a nil constructor or
// option panicked fx.New.
func TestANilModuleFailsTheEngineWithAnErrorNamingIt(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	var nilConstructor func() *recorder
	for _, c := range []struct {
		name   string
		option fx.Option
		want   string
	}{
		{"a nil pointer", app.AsModule(newNilRecorder), "module constructor github.com/abi-engine/engine/app_test.newNilRecorder returned a nil module"},
		{"a nil interface and no error", app.AsModule(func() (app.Module, error) { return nil, nil }), "returned a nil module (app.Module)"},
		{"a nil constructor", app.AsModule(nilConstructor), "a module constructor must be a function, got func() *app_test.recorder"},
		{"no constructor", app.AsModule(nil), "a module constructor must be a function, got <nil>"},
		{"a nil option", nil, "option 1 of the 1 added to the engine (modules and the like) is nil"},
		{"a nil module in the group", fx.Provide(fx.Annotate(func() app.Module { return nil }, fx.ResultTags(`group:"modules"`))),
			"is nil (<nil>): its constructor returned no module"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := func() (err error) {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("the engine's graph panicked: %v", p)
					}
				}()
				a := fx.New(app.Graph(options(testConfig(t, url, "serve", "", memoryServices)), c.option), fx.NopLogger)
				if err := a.Err(); err != nil {
					return err
				}
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()
				if err := a.Start(ctx); err != nil {
					return err
				}
				_ = a.Stop(ctx)
				return nil
			}()
			if err == nil || !strings.Contains(dig.RootCause(err).Error(), c.want) {
				t.Fatalf("error %v, want one saying %q", err, c.want)
			}
		})
	}
}

func newNilRecorder() *recorder { return nil }
