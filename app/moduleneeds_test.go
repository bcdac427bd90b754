package app_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/abi-engine/engine/app"
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
	if err := a.Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err := a.Start(ctx)
	const want = `module m needs "kv", which is no service: want one of cache, document, keyvalue, object_storage, secret, vector_store`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("start: %v, want an error saying %q", err, want)
	}
}
