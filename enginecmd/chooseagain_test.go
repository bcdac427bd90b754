package enginecmd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/app/config"
	"github.com/abi-engine/engine/internal/natstest"
)

// The engine a command chose to be a client of may be another command's,
// serving for its own length, and stop before this command's call: a
// script's commands run side by side. The command then finds no engine
// answering, chooses again, serves itself, and does its work. Before, it
// failed, engine unavailable, after retrying its call for five seconds
// with no engine to answer it, where run a moment later it would have
// served.
func TestACommandWhoseEngineStopsBeforeItsCallServesItself(t *testing.T) {
	srv := natstest.StartServer(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "engine.yaml")
	yaml := fmt.Sprintf("nats:\n  url: %s\n  engine: {lease_seconds: 1, drain_seconds: 1}\nhttp: {listen: \"off\"}\ndata_dir: %s\n"+
		"services:\n  keyvalue: {adapter: shared}\n  vector_store: {adapter: off}\n",
		srv.ClientURL(), filepath.Join(dir, "data"))
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ABI_ENGINE_ROLE", "")
	loaded, err := config.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	serving := app.New(app.Options{Config: loaded, Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := serving.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = serving.Stop(context.Background())
		}
	})
	key := "chosen-" + t.Name()
	var stderr bytes.Buffer
	if code := Run([]string{"kv", "set", key, "v", "--config", cfg}, io.Discard, &stderr, Options{}); code != exitOK {
		t.Fatalf("kv set = %d: %s", code, stderr.String())
	}

	// The first engine the command starts, a client of the one serving,
	// waits in its start until that one has stopped.
	var starts atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	hold := fx.Invoke(func(lc fx.Lifecycle) {
		lc.Append(fx.Hook{OnStart: func(context.Context) error {
			if starts.Add(1) == 1 {
				close(started)
				<-release
			}
			return nil
		}})
	})
	type result struct {
		code           int
		stdout, stderr string
	}
	done := make(chan result, 1)
	go func() {
		var stdout, stderr bytes.Buffer
		code := Run([]string{"kv", "get", key, "--config", cfg}, &stdout, &stderr, Options{Modules: []fx.Option{hold}})
		done <- result{code, stdout.String(), stderr.String()}
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the command started no engine in 30s")
	}
	stopped = true
	if err := serving.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	close(release)
	select {
	case r := <-done:
		if r.code != exitOK || r.stdout != "v" {
			t.Fatalf("kv get after its engine stopped = %d, stdout %q, stderr %q; want 0 and v", r.code, r.stdout, r.stderr)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("kv get did not return in 60s")
	}
}
