package app_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/abi-engine/engine/adapters/secondary/lease/jetstream"
	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
)

// lineWatch is a log's writer that closes seen at the first line holding
// want.
type lineWatch struct {
	want []byte
	seen chan struct{}
	once sync.Once
}

func (w *lineWatch) Write(p []byte) (int, error) {
	if bytes.Contains(p, w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

// The engine of a CLI command (app.Options.Transient) that serves alone
// says so in its lease record, and `engine serve` started meanwhile waits
// for it to release the lease as its command returns, then serves. Before,
// serve's start failed naming the command's engine at its first renewal,
// a quarter of a lease in.
func TestServeStartedBesideACommandsEngineServesOnceItReleases(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	co := options(testConfig(t, url, "auto", "", memoryServices))
	co.Transient = true
	var command *app.Engine
	cmd := fxtest.New(t, app.Graph(co), fx.Populate(&command), fx.StartTimeout(30*time.Second))
	cmd.RequireStart()
	if command.Outcome() != domain.OutcomeServe {
		t.Fatalf("the command's engine alone on the account: outcome %v, want serve", command.Outcome())
	}
	lease, err := jetstream.Open(ctx, natstest.Connect(t, url), jetstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := lease.Read(ctx); err != nil || !rec.Holder.Command {
		t.Fatalf("the command's engine's lease record %+v, %v; want it marked command", rec.Holder, err)
	}

	watch := &lineWatch{want: []byte("the engine of a command holds the lease"), seen: make(chan struct{})}
	so := options(testConfig(t, url, "serve", "", memoryServices))
	so.Logger = slog.New(slog.NewTextHandler(watch, nil))
	var served *app.Engine
	srv := fx.New(app.Graph(so), fx.Populate(&served), fx.NopLogger)
	if err := srv.Err(); err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- srv.Start(ctx) }()
	select {
	case <-watch.seen:
	case err := <-started:
		if err == nil {
			_ = srv.Stop(context.Background())
		}
		t.Fatalf("serve's start beside a command's engine that still serves returned %v; want it to wait for the release", err)
	case <-ctx.Done():
		t.Fatal("serve's start neither waited for the command's engine nor returned")
	}
	cmd.RequireStop()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("serve's start once the command's engine released: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("serve's start did not return once the command's engine released")
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	if served.Outcome() != domain.OutcomeServe {
		t.Fatalf("serve after the command's engine released: outcome %v, want serve", served.Outcome())
	}
	if rec, err := lease.Read(ctx); err != nil || rec.Holder.Command || rec.Holder.InstanceID != served.Me().InstanceID {
		t.Fatalf("the lease after serve took it: %+v, %v; want serve's record, not marked command", rec.Holder, err)
	}
}
