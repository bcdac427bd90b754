package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/storage"
	"github.com/abi-engine/engine/app/config"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
)

// order records the modules' starts and stops as they come.
type order struct {
	mu     sync.Mutex
	events []string
}

func (o *order) add(e string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, e)
}

func (o *order) seen() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.events)
}

type orderedModule struct {
	name string
	fail bool
	o    *order
}

func (m orderedModule) Name() string    { return m.name }
func (m orderedModule) Needs() []string { return nil }
func (m orderedModule) Stop(context.Context) error {
	m.o.add("stop " + m.name)
	return nil
}

func (m orderedModule) Start(context.Context, ModuleEnv) error {
	if m.fail {
		return errors.New("refused")
	}
	m.o.add("start " + m.name)
	return nil
}

// memoryEngine is the configuration of a serving engine on memory stores,
// with a short lease and no HTTP API, and its storage built.
func memoryEngine(t *testing.T, url string) (*config.Config, []storage.Built) {
	t.Helper()
	yaml := fmt.Sprintf(`nats:
  url: %s
  engine: {role: serve, lease_seconds: 1, drain_seconds: 1}
http: {listen: off}
data_dir: %s
services:
  keyvalue: {adapter: memory}
  document: {adapter: memory}
  object_storage: {adapter: memory}
  vector_store: {adapter: memory}
  cache: {adapter: memory}
  secret: {adapter: env}
`, url, filepath.Join(t.TempDir(), "data"))
	cfg, err := config.Parse("test.yaml", []byte(yaml), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	built, err := BuildStorage(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, built
}

// A start that fails at a module stops the modules it had started, the
// last first, since fx runs no stop for a start that failed; a stop after
// it stops none of them again.
func TestAStartThatFailsAtAModuleStopsTheOnesItStarted(t *testing.T) {
	s := natstest.StartServer(t)
	cfg, built := memoryEngine(t, s.ClientURL())
	o := &order{}
	e := NewEngine(EngineParams{
		Config: cfg, Holder: domain.ThisProcess("test", ""), Logger: slog.New(slog.DiscardHandler),
		Storage: built,
		Modules: []Module{
			orderedModule{name: "a", o: o}, orderedModule{name: "b", o: o}, orderedModule{name: "c", fail: true, o: o},
		},
		Shutdown: func(int) {},
		Exit:     func(int) {},
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := e.Start(ctx); err == nil || !strings.Contains(err.Error(), "start module c") {
		t.Fatalf("start: %v, want module c's refusal", err)
	}
	want := []string{"start a", "start b", "stop b", "stop a"}
	if got := o.seen(); !slices.Equal(got, want) {
		t.Fatalf("modules: %q, want %q", got, want)
	}
	_ = e.Stop(ctx)
	if got := o.seen(); !slices.Equal(got, want) {
		t.Fatalf("after a stop, modules: %q, want %q", got, want)
	}
}

// moduleEngine is an engine on memoryEngine's configuration at url with
// modules, whose stop and exit do nothing.
func moduleEngine(t *testing.T, url string, modules ...Module) *Engine {
	t.Helper()
	cfg, built := memoryEngine(t, url)
	return NewEngine(EngineParams{
		Config: cfg, Holder: domain.ThisProcess("test", ""), Logger: slog.New(slog.DiscardHandler), Storage: built,
		Modules: modules, Shutdown: func(int) {}, Exit: func(int) {},
	})
}
