package enginecmd

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/fx"

	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/ports"
)

// vectorModule needs the vector store.
type vectorModule struct{}

func (vectorModule) Name() string                               { return "search" }
func (vectorModule) Needs() []string                            { return []string{ports.ServiceVectorStore} }
func (vectorModule) Start(context.Context, app.ModuleEnv) error { return nil }
func (vectorModule) Stop(context.Context) error                 { return nil }

// config check refuses a configuration that switches off a service one of
// the program's modules needs, as the engine refuses to start on it: the
// check is where an operator finds out before a deploy. Before, it said
// the configuration was valid, and the engine then refused to start on it.
func TestConfigCheckRefusesAConfigurationThatSwitchesOffAServiceAModuleNeeds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "engine.yaml")
	if err := os.WriteFile(path, []byte("services:\n  vector_store: {adapter: off}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := Options{Modules: []fx.Option{app.AsModule(func() vectorModule { return vectorModule{} })}}
	var stdout, stderr bytes.Buffer
	code := Run([]string{"config", "check", "--config", path}, &stdout, &stderr, o)
	const want = "module search needs the vector_store service, which is switched off"
	if code != 1 || !strings.Contains(stderr.String(), want) {
		t.Fatalf("config check = %d\nstdout: %s\nstderr: %s\nwant 1 and an error saying %q", code, stdout.String(), stderr.String(), want)
	}
	if strings.Contains(stdout.String(), "configuration is valid") {
		t.Fatalf("config check said the configuration is valid:\n%s", stdout.String())
	}

	stdout.Reset()
	stderr.Reset()
	if code := Run([]string{"config", "check"}, &stdout, &stderr, o); code != 0 || !strings.Contains(stdout.String(), "configuration is valid") {
		t.Fatalf("config check of the defaults, which keep the vector store on = %d\nstdout: %s\nstderr: %s", code, stdout.String(), stderr.String())
	}
}
