package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/abi-engine/engine/internal/natstest"
)

// silentPostgres accepts connections and never answers: a backend whose
// open hangs, as one behind a dropped route does.
func silentPostgres(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	return ln.Addr().String()
}

// A signal that reaches an engine after its claim, while it still opens
// its backends, ends the start; the engine then releases the lease it took
// before the process exits, so the next engine serves at once. Before, the
// command exited as soon as the start's context was cancelled, while the
// engine's own clean-up still ran, and the lease stayed held by a process
// that was gone: the next engine waited a whole lease.
func TestASignalWhileTheBackendsOpenReleasesTheLeaseBeforeExiting(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	e := startEngine(t, silentBackendConfig(t, url))
	signalWhileOpening(t, url, e)
	if code := e.exitCode(t); code != 0 {
		t.Fatalf("exit code %d after a signal during the start:\n%s", code, e.output())
	}
	leaseReleasedBy(t, url, e)
}

// A command such as kv get that finds no engine serves for its length; a
// signal while it opens its backends must release the lease it took, as
// the engine's does.
func TestASignalWhileACommandOpensItsBackendsReleasesTheLeaseBeforeExiting(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	e := startProcess(t, exec.Command(engineBin, "kv", "get", "k", "--config", silentBackendConfig(t, url)))
	signalWhileOpening(t, url, e)
	if code := e.exitCode(t); code == 0 {
		t.Fatalf("a command interrupted before it ran exited 0:\n%s", e.output())
	}
	leaseReleasedBy(t, url, e)
}

// silentBackendConfig is a configuration whose keyvalue store is a
// PostgreSQL that never answers, so a start hangs opening it.
func silentBackendConfig(t *testing.T, url string) string {
	t.Helper()
	dir := t.TempDir()
	yaml := fmt.Sprintf(`nats:
  url: %s
  engine: {lease_seconds: 1, drain_seconds: 1}
http: {listen: "127.0.0.1:0"}
data_dir: %s
services:
  keyvalue: {adapter: postgres, config: {dsn: "postgres://engine:engine@%s/engine?sslmode=disable"}}
`, url, filepath.Join(dir, "data"), silentPostgres(t))
	config := filepath.Join(dir, "engine.yaml")
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	// The lease key has history, the released record of an engine before:
	// a hold on a key without one waits out a quarantine and is, by
	// design, left to go silent rather than released.
	leaseWithHistory(t, url)
	return config
}

// signalWhileOpening waits for e to claim the lease, then signals it while
// it opens its backends.
func signalWhileOpening(t *testing.T, url string, e *process) {
	t.Helper()
	waitUntil(t, "the engine's claim", func() bool {
		rec := readLease(t, url)
		return rec.Holder.PID == e.cmd.Process.Pid && !rec.Holder.Released
	})
	if err := e.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
}

// leaseReleasedBy fails unless the lease holds e's released record.
func leaseReleasedBy(t *testing.T, url string, e *process) {
	t.Helper()
	if rec := readLease(t, url); !rec.Holder.Released || rec.Holder.PID != e.cmd.Process.Pid {
		t.Fatalf("the engine exited with its start cut short and the lease reading %+v, want its released record:\n%s", rec, e.output())
	}
}

// A start that runs out of time (here a backend whose open never answers)
// fails, and the engine releases the lease it took before the process
// exits. Before, fx gave up on the start at its timeout, the command
// exited at once while the engine's clean-up still ran, and the lease
// stayed held by a process that was gone.
func TestAStartThatRunsOutOfTimeReleasesTheLeaseBeforeExiting(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	e := startEngine(t, silentBackendConfig(t, url))
	if code := e.exitCode(t); code != 1 {
		t.Fatalf("exit code %d after a start that ran out of time, want 1:\n%s", code, e.output())
	}
	leaseReleasedBy(t, url, e)
}
