package app_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/logbuf"
	"github.com/abi-engine/engine/internal/natstest"
)

// What a store logs goes to the engine's log, with the engine's instance
// id, as the engine's own lines do: here the warning of a keyvalue bucket
// on JetStream left with the broker's markers of expiry, which the
// engine's user may not turn off. Before, the stores logged on
// slog.Default(), and the line reached the process's default log without
// saying which engine wrote it.
func TestAStoresWarningIsOnTheEnginesLogWithItsInstanceID(t *testing.T) {
	url := markedFencedBucket(t)
	services := strings.Replace(memoryServices, "keyvalue: {adapter: memory}", "keyvalue: {adapter: jetstream, config: {bucket: ABI_KV}}", 1)
	engineURL := fmt.Sprintf("nats://engine:engine@%s", strings.TrimPrefix(url, "nats://"))
	e, _, logs, a := startLogged(t, testConfig(t, engineURL, "serve", "", services))
	t.Cleanup(a.RequireStop)
	const warning = "keeps the broker's markers of expiry"
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(logs.String(), warning) {
		if time.Now().After(deadline) {
			t.Fatalf("the engine's log holds no warning of the bucket's markers after a minute:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, warning) && !strings.Contains(line, "instance="+e.Me().InstanceID) {
			t.Fatalf("the store's warning lacks the engine's instance id %s: %s", e.Me().InstanceID, line)
		}
	}
}

// An engine made with NewEngine, on storage resolved by BuildStorage, has
// its stores log on the engine's log too. Before, only the engine's fx
// graph handed its log to the stores, and those of an engine made without
// it logged on slog.Default().
func TestTheStoresOfAnEngineMadeWithNewEngineLogOnItsLog(t *testing.T) {
	url := markedFencedBucket(t)
	services := strings.Replace(memoryServices, "keyvalue: {adapter: memory}", "keyvalue: {adapter: jetstream, config: {bucket: ABI_KV}}", 1)
	engineURL := fmt.Sprintf("nats://engine:engine@%s", strings.TrimPrefix(url, "nats://"))
	cfg := testConfig(t, engineURL, "serve", "", services)
	built, err := app.BuildStorage(cfg)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	e := app.NewEngine(app.EngineParams{
		Config: cfg, Holder: domain.ThisProcess("test", ""), Storage: built,
		Logger:   slog.New(slog.NewTextHandler(logs, nil)).With("engine", "made-with-NewEngine"),
		Shutdown: func(int) {}, Exit: func(int) {},
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := e.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = e.Stop(context.WithoutCancel(ctx)) })
	const warning = "keeps the broker's markers of expiry"
	for !strings.Contains(logs.String(), warning) {
		select {
		case <-ctx.Done():
			t.Fatalf("the engine's log holds no warning of the bucket's markers after a minute:\n%s", logs.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, warning) && !strings.Contains(line, "engine=made-with-NewEngine") {
			t.Fatalf("the store's warning is not on the engine's log: %s", line)
		}
	}
}

// markedFencedBucket is the URL of a broker whose bucket ABI_KV keeps the
// broker's markers of expiry, which the engine's user may not turn off,
// and has the atomic batches the keyvalue store's fence needs (ADR 0020):
// an operator turned them on, as the engine's user may not.
func markedFencedBucket(t *testing.T) string {
	t.Helper()
	url, stream := natstest.MarkedBucket(t, "ABI_KV")
	js, err := jetstream.New(natstest.Connect(t, url, nats.UserInfo("ops", "ops")))
	if err != nil {
		t.Fatal(err)
	}
	sc := stream.CachedInfo().Config
	sc.AllowAtomicPublish = true
	if _, err := js.UpdateStream(t.Context(), sc); err != nil {
		t.Fatalf("turn on atomic batches on bucket ABI_KV: %v", err)
	}
	return url
}
