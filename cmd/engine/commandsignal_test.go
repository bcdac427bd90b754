package main

import (
	"context"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/lease/jetstream"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// A command such as obj put that finds no engine serves for its length,
// and stops as an engine does: it releases the lease and waits for the
// calls and transfers it received, up to drain_seconds. An operator who
// signals it again while it stops wants it gone now, as for serve: the
// second signal ends the process at once with exit code 1, and the lease
// it released stays released. Before, signal.NotifyContext kept every
// signal after the first from the process, and the command waited out
// the whole drain.
func TestASecondSignalWhileACommandStopsEndsItAtOnce(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	config := objectsConfig(t, url, 300)
	leaseWithHistory(t, url)
	cmd := exec.Command(engineBin, "obj", "put", "mine", "-", "--config", config)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	e := startProcess(t, cmd)
	waitUntil(t, "the command's claim", func() bool {
		rec := readLease(t, url)
		return rec.Holder.PID == e.cmd.Process.Pid && !rec.Holder.Released
	})
	// Another caller's upload that stalls holds the command's drain open.
	objects := natsclient.NewObjectStorage(natsclient.New(natstest.Connect(t, url)))
	r := &slowReader{data: make([]byte, 1<<20), hold: 256 << 10, release: make(chan struct{})}
	defer close(r.release)
	go func() { _, _ = objects.Put(context.Background(), "stuck", r, ports.PutObjectOptions{}) }()
	waitUntil(t, "the upload to the command stalls", func() bool { return r.given.Load() >= 256<<10 })

	if err := e.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The command's own put ends with its input.
	_ = stdin.Close()
	// The stop, and the drain of the stalled upload, has begun once the
	// lease is released.
	waitUntil(t, "the command releases the lease", func() bool {
		rec := readLease(t, url)
		return rec.Holder.PID == e.cmd.Process.Pid && rec.Holder.Released
	})
	if err := e.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the command still drains 30s after a second signal (drain_seconds 300):\n%s", e.output())
	}
	if code := e.cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("exit code %d after a second signal, want 1:\n%s", code, e.output())
	}
	if rec := readLease(t, url); !rec.Holder.Released || rec.Holder.PID != e.cmd.Process.Pid {
		t.Fatalf("after the forced exit the lease reads %+v, want the command's released record", rec)
	}
}

// leaseWithHistory writes the released record of an engine before, so
// that the next engine serves at once: a hold on a key without history
// waits out a quarantine first.
func leaseWithHistory(t *testing.T, url string) {
	t.Helper()
	l, err := jetstream.Open(t.Context(), natstest.Connect(t, url), jetstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	before := domain.ThisProcess("v0", "")
	rev, err := l.Create(t.Context(), before)
	if err != nil {
		t.Fatal(err)
	}
	before.Released = true
	if _, err := l.Update(t.Context(), before, rev); err != nil {
		t.Fatal(err)
	}
}
