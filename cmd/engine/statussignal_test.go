package main

import (
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/abi-engine/engine/adapters/secondary/lease/jetstream"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
)

// A signal ends engine status while it waits for the holder to renew, as
// it ends any command: exit code 1, saying which signal interrupted it.
// Before, an interrupt made it say "engine: context canceled", and a
// hangup killed it as any process without a handler.
func TestAnInterruptedStatusSaysItWasInterrupted(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			url := natstest.StartServer(t).ClientURL()
			config := writeConfig(t, url)
			nc := natstest.Connect(t, url)
			l, err := jetstream.Open(t.Context(), nc, jetstream.Options{})
			if err != nil {
				t.Fatal(err)
			}
			// A record never renewed, by a holder whose lease is long: status
			// watches for a renewal for two minutes.
			holder := domain.Holder{InstanceID: domain.NewInstanceID(), Host: "elsewhere", PID: 7, Version: "dev", StartedAt: time.Now(), Lease: 2 * time.Minute}
			if _, err := l.Create(t.Context(), holder); err != nil {
				t.Fatal(err)
			}
			js, err := natsjs.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			// A runner started under nohup ignores SIGHUP, and its children
			// would too; a signal this process asks for starts at its
			// default in them.
			asked := make(chan os.Signal, 1)
			signal.Notify(asked, sig)
			e := startProcess(t, exec.Command(engineBin, "status", "--config", config))
			signal.Stop(asked)
			// The test watches nothing: a consumer on the bucket's stream is
			// status's watch for a renewal.
			waitUntil(t, "status watches the lease", func() bool {
				s, err := js.Stream(t.Context(), "KV_"+jetstream.DefaultBucket)
				if err != nil {
					return false
				}
				info, err := s.Info(t.Context())
				return err == nil && info.State.Consumers > 0
			})
			if err := e.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case <-e.done:
			case <-time.After(30 * time.Second):
				t.Fatalf("status still runs 30s after a signal:\n%s", e.output())
			}
			want := "engine: interrupted by a signal (" + sig.String() + ")"
			if code := e.cmd.ProcessState.ExitCode(); code != 1 || !strings.HasPrefix(e.output(), want) || strings.Contains(e.output(), "context canceled") {
				t.Fatalf("status after a signal: exit code %d\n%s\nwant 1 and %q", code, e.output(), want)
			}
		})
	}
}
