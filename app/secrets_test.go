package app_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/app/config"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
)

// Secrets are each deployment's own configuration. A standby of a release
// that rotated a secret starts its modules while the old engine still
// serves; they must read the secret as this engine's sources hold it, not
// as the old engine does, or they would start, and keep going after the
// handover, with the value the rotation replaced.
func TestAStandbysModulesReadTheSecretsOfTheirOwnEngine(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	engine := func(password string) *config.Config {
		path := filepath.Join(t.TempDir(), ".env")
		if err := os.WriteFile(path, []byte("DB_PASSWORD="+password+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		services := strings.Replace(memoryServices, "secret: {adapter: env}",
			fmt.Sprintf("secret: {adapter: dotenv, config: {path: %q}}", path), 1)
		cfg := testConfig(t, url, "serve", "", services)
		cfg.NATS.CallerSecret = strings.Repeat("s", config.MinCallerSecret)
		cfg.HTTP.Listen = config.HTTPOff
		cfg.NATS.Engine.HotStandby = true
		return cfg
	}
	read := func(e *app.Engine) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		v, err := e.Services().Secrets.Get(ctx, "DB_PASSWORD")
		if err != nil {
			t.Fatalf("Get DB_PASSWORD: %v", err)
		}
		return v
	}
	old, a := start(t, engine("before"))
	defer a.RequireStop()
	next, b := start(t, engine("rotated"))
	defer b.RequireStop()
	if next.Outcome() != domain.OutcomeStandby {
		t.Fatalf("the second engine is %v, want a standby", next.Outcome())
	}
	if got := read(old); got != "before" {
		t.Errorf("the serving engine's modules read %q, want its own %q", got, "before")
	}
	if got := read(next); got != "rotated" {
		t.Errorf("the standby's modules read %q, the serving engine's value; want their own engine's %q", got, "rotated")
	}
}
