package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/abi-engine/engine/internal/natstest"
)

// A command that serves for its length, and whose output is closed before
// it has written it all (engine obj get big - | head -c 1), releases the
// lease as it exits, and says what failed. Before, its first write to the
// closed pipe killed it with SIGPIPE while it held the lease, and no
// engine served the account until the lease ran out.
func TestACommandWhoseOutputIsClosedReleasesTheLease(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	config := writeConfigLease(t, url, 10)
	leaseWithHistory(t, url)
	ok(t, bytes.NewReader(make([]byte, 1<<20)), "obj", "put", "big", "-", "--config", config)

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, engineBin, "obj", "get", "big", "-", "--config", config)
	cmd.Env = environment()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The reader goes away before the command writes a byte.
	_ = out.Close()
	_ = cmd.Wait()
	st := cmd.ProcessState
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Fatalf("the command was killed by %v when its output closed:\n%s", ws.Signal(), stderr.String())
	}
	if st.ExitCode() != 1 || !strings.Contains(stderr.String(), "broken pipe") {
		t.Fatalf("the command whose output closed exited %d, want 1 and an error naming the broken pipe:\n%s", st.ExitCode(), stderr.String())
	}
	if rec := readLease(t, url); !rec.Holder.Released || rec.Holder.PID != st.Pid() {
		t.Fatalf("after the command whose output closed the lease reads %+v, want released by pid %d:\n%s", rec, st.Pid(), stderr.String())
	}
}

// An engine whose log pipe closes (engine 2>&1 | tee log, and tee is
// gone) serves on, and stops cleanly on a signal, releasing the lease.
// Before, its next log line killed it with SIGPIPE, holding the lease.
func TestAnEngineWhoseLogIsClosedServesOnAndStopsCleanly(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	leaseWithHistory(t, url)
	cmd := exec.Command(engineBin, "--config", writeConfig(t, url))
	cmd.Env = environment()
	logs, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = logs.Close()
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	waitUntil(t, "the engine's claim", func() bool {
		select {
		case <-done:
			t.Fatalf("the engine whose log closed ended: %v", cmd.ProcessState)
		default:
		}
		rec := readLease(t, url)
		return rec.Holder.PID == cmd.Process.Pid && !rec.Holder.Released
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the engine did not stop within 60 s of a signal")
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("the engine whose log closed exited %v after a signal, want 0", cmd.ProcessState)
	}
	if rec := readLease(t, url); !rec.Holder.Released || rec.Holder.PID != cmd.Process.Pid {
		t.Fatalf("after its stop the lease reads %+v, want released by the engine", rec)
	}
}

// environment is the test's, without a variable that chooses the role,
// the rollout or the broker.
func environment() []string {
	var env []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); name != "ABI_ENGINE_ROLE" && name != "ABI_ROLLOUT_ID" && name != "NATS_URL" {
			env = append(env, kv)
		}
	}
	return env
}
