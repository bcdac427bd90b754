package app_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/dig"
	"go.uber.org/fx"

	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
)

// needsModule needs what it is given.
type needsModule struct {
	stepModule
	needs []string
}

func (m *needsModule) Needs() []string { return m.needs }

// A module that needs a service by a name that is none, such as "kv" for
// "keyvalue", fails the start with an error that says so and names the
// services there are. Before, it was told the service was switched off,
// and sent its operator to look for it in the configuration.
func TestAModuleNeedingAServiceThatIsNoneIsToldSo(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	cfg := testConfig(t, url, "client", "", memoryServices)
	cfg.HTTP.Listen = "off"
	a := fx.New(app.Graph(options(cfg), app.AsModule(func() *needsModule {
		return &needsModule{stepModule: stepModule{name: "m", s: &steps{}}, needs: []string{"keyvalue", "kv"}}
	})), fx.NopLogger)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err := a.Start(ctx)
	const want = `module m needs "kv", which is no service: want one of cache, document, keyvalue, object_storage, secret, vector_store`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("start: %v, want an error saying %q", err, want)
	}
}

// untouched fails t unless broker s never saw a connection and holds no
// stream, the lease bucket's among them.
func untouched(t *testing.T, s *server.Server) {
	t.Helper()
	varz, err := s.Varz(nil)
	if err != nil {
		t.Fatal(err)
	}
	jsz, err := s.Jsz(nil)
	if err != nil {
		t.Fatal(err)
	}
	if varz.TotalConnections != 0 || jsz.Streams != 0 {
		t.Fatalf("the broker saw %d connections and holds %d streams, want none: the engine reached it", varz.TotalConnections, jsz.Streams)
	}
}

// A serving engine one of whose modules needs a service the configuration
// switches off is refused as its graph is built, before any hook runs: it
// never reaches the broker, so it neither claims the lease nor makes its
// bucket. Before, the needs were checked only after the claim, and such
// an engine took over a released lease, or held a new lease key for a
// whole lease, only to fail and let it go.
func TestAModuleNeedingASwitchedOffServiceIsRefusedBeforeTheEngineReachesTheBroker(t *testing.T) {
	s := natstest.StartServer(t)
	services := strings.Replace(memoryServices, "vector_store: {adapter: memory}", "vector_store: {adapter: off}", 1)
	a := fx.New(app.Graph(options(testConfig(t, s.ClientURL(), "serve", "", services)),
		app.AsModule(func() *recorder { return newRecorder("keyvalue", "vector_store") })), fx.NopLogger)
	const want = "module recorder needs the vector_store service, which is switched off"
	if err := a.Err(); err == nil || !strings.Contains(dig.RootCause(err).Error(), want) {
		t.Errorf("fx.New: %v, want an error saying %q", err, want)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := a.Start(ctx); err == nil {
		_ = a.Stop(ctx)
		t.Fatalf("the engine started with a module that needs a service switched off")
	}
	untouched(t, s)
}

// An engine made with NewEngine refuses such a module at the very start of
// its Start, before it dials.
func TestAnEngineMadeWithNewEngineRefusesAModuleNeedingASwitchedOffServiceBeforeItDials(t *testing.T) {
	s := natstest.StartServer(t)
	services := strings.Replace(memoryServices, "document: {adapter: memory}", "document: {adapter: off}", 1)
	cfg := testConfig(t, s.ClientURL(), "serve", "", services)
	built, err := app.BuildStorage(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := app.NewEngine(app.EngineParams{
		Config: cfg, Holder: domain.ThisProcess("test", ""), Logger: slog.New(slog.DiscardHandler), Storage: built,
		Modules:  []app.Module{newRecorder("document")},
		Shutdown: func(int) {}, Exit: func(int) {},
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err = e.Start(ctx)
	if err == nil {
		_ = e.Stop(ctx)
	}
	const want = "module recorder needs the document service, which is switched off"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("start: %v, want an error saying %q", err, want)
	}
	untouched(t, s)
}
