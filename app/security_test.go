package app_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/app/config"
	"github.com/abi-engine/engine/internal/logbuf"
	"github.com/abi-engine/engine/internal/natstest"
)

// startLogged runs an engine's graph with its logs in a buffer.
func startLogged(t *testing.T, cfg *config.Config) (*app.Engine, *app.HTTP, *logbuf.Buffer, *fxtest.App) {
	t.Helper()
	logs := &logbuf.Buffer{}
	o := options(cfg)
	o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var (
		e *app.Engine
		h *app.HTTP
	)
	a := fxtest.New(t, app.Graph(o), fx.Populate(&e, &h), fx.StartTimeout(30*time.Second))
	a.RequireStart()
	return e, h, logs, a
}

const uncheckedWarning = "callers are not checked"

func TestAnEngineWithoutCallerTokensSaysSoOnceAtStart(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	_, _, logs, a := startLogged(t, testConfig(t, url, "serve", "", memoryServices))
	text := logs.String()
	if n := strings.Count(text, uncheckedWarning); n != 1 || !strings.Contains(text, "level=WARN msg=\""+uncheckedWarning) {
		t.Fatalf("the warning shows %d times, want once at warning level:\n%s", n, text)
	}
	_, _, clientLogs, b := startLogged(t, testConfig(t, url, "client", "", memoryServices))
	if strings.Contains(clientLogs.String(), uncheckedWarning) {
		t.Errorf("a client, which serves nothing, warns:\n%s", clientLogs.String())
	}
	b.RequireStop()
	a.RequireStop()

	secret := strings.Repeat("k", config.MinCallerSecret)
	cfg := testConfig(t, url, "serve", "", memoryServices)
	cfg.NATS.CallerSecret, cfg.HTTP.Listen = secret, config.HTTPOff
	_, h, signedLogs, c := startLogged(t, cfg)
	if text := signedLogs.String(); strings.Contains(text, uncheckedWarning) || strings.Contains(text, secret) {
		t.Errorf("an engine with a caller secret warns or shows it:\n%s", text)
	}
	if h.Addr() != "" || !strings.Contains(signedLogs.String(), "HTTP API off") {
		t.Errorf("http.listen off listens at %q", h.Addr())
	}
	c.RequireStop()
}

func TestTheURLsCredentialsAreMaskedInStatusAndLogs(t *testing.T) {
	hostport := strings.TrimPrefix(natstest.StartServer(t).ClientURL(), "nats://")
	// A server without authorization takes any credentials, so the
	// engine connects with both forms.
	url := fmt.Sprintf("nats://engine:natspw@%s,nats://T0KENs3cret@%s", hostport, hostport)
	e, _, logs, a := startLogged(t, testConfig(t, url, "serve", "", memoryServices))
	st := e.Status()
	a.RequireStop()
	for _, secret := range []string{"natspw", "T0KENs3cret"} {
		if strings.Contains(st.NATS, secret) || strings.Contains(logs.String(), secret) {
			t.Errorf("%q shows in the status %q or in the logs:\n%s", secret, st.NATS, logs.String())
		}
	}
	if !strings.Contains(st.NATS, "engine:***@"+hostport) || !strings.Contains(logs.String(), "engine:***@"+hostport) {
		t.Errorf("status %q or the logs do not name the server:\n%s", st.NATS, logs.String())
	}
}
