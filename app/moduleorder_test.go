package app_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/internal/natstest"
)

// steps records the modules' starts and stops as they come.
type steps struct {
	mu   sync.Mutex
	seen []string
}

func (s *steps) add(step string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = append(s.seen, step)
}

func (s *steps) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.seen
	s.seen = nil
	return out
}

type stepModule struct {
	name string
	s    *steps
}

func (m *stepModule) Name() string    { return m.name }
func (m *stepModule) Needs() []string { return nil }
func (m *stepModule) Start(context.Context, app.ModuleEnv) error {
	m.s.add("start " + m.name)
	return nil
}

func (m *stepModule) Stop(context.Context) error {
	m.s.add("stop " + m.name)
	return nil
}

// The modules start in the order they were given to the engine, those in
// a group of options included, and stop the last first, at every start.
// Before, fx handed them over in an order it drew anew at each start.
func TestModulesStartInTheOrderGivenAtEveryStart(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	s := &steps{}
	module := func(name string) fx.Option {
		return app.AsModule(func() *stepModule { return &stepModule{name: name, s: s} })
	}
	given := []fx.Option{
		module("a"), module("b"),
		fx.Options(module("c"), module("d")),
		module("e"), module("f"),
	}
	var want []string
	for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
		want = append(want, "start "+n)
	}
	for _, n := range []string{"f", "e", "d", "c", "b", "a"} {
		want = append(want, "stop "+n)
	}
	for i := range 10 {
		startAndStopModules(t, url, i, given)
		if got := s.take(); !slices.Equal(got, want) {
			t.Fatalf("start %d: modules went %s, want %s", i+1, strings.Join(got, ", "), strings.Join(want, ", "))
		}
	}
}

// A module put straight into the fx group "modules", without AsModule,
// has no place of its own: given before those given with AsModule, it
// still starts after them, and stops before them.
func TestAModulePutStraightIntoTheGroupStartsAfterThoseGivenWithAsModule(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	s := &steps{}
	given := []fx.Option{
		fx.Provide(fx.Annotate(func() app.Module { return &stepModule{name: "straight", s: s} }, fx.ResultTags(`group:"modules"`))),
		app.AsModule(func() *stepModule { return &stepModule{name: "a", s: s} }),
		app.AsModule(func() *stepModule { return &stepModule{name: "b", s: s} }),
	}
	want := []string{"start a", "start b", "start straight", "stop straight", "stop b", "stop a"}
	for i := range 5 {
		startAndStopModules(t, url, i, given)
		if got := s.take(); !slices.Equal(got, want) {
			t.Fatalf("start %d: modules went %s, want %s", i+1, strings.Join(got, ", "), strings.Join(want, ", "))
		}
	}
}

// startAndStopModules starts and stops, as start i+1, a client engine
// without HTTP that is given the options given.
func startAndStopModules(t *testing.T, url string, i int, given []fx.Option) {
	t.Helper()
	cfg := testConfig(t, url, "client", "", memoryServices)
	cfg.HTTP.Listen = "off"
	a := fx.New(app.Graph(options(cfg), given...), fx.NopLogger)
	if err := a.Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatalf("start %d: %v", i+1, err)
	}
	if err := a.Stop(ctx); err != nil {
		t.Fatalf("stop %d: %v", i+1, err)
	}
}
