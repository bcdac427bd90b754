//go:build unix

// Unix only: the FIFO test makes its FIFO with syscall.Mkfifo.

package main

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/abi-engine/engine/internal/natstest"
)

// A signal ends an upload whose input has stalled: `producer | engine obj
// put k` with a producer that pauses, or a terminal the operator types
// into. The command serving on its own stops as after any signal: it
// releases the lease and exits 1, though its stdin is still open. Before,
// the read of stdin ignored the signal, and the command held the lease
// until the producer wrote again or closed the pipe, however long that
// took.
func TestASignalEndsAnUploadWhoseInputStalls(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	config := writeConfigLease(t, url, 10)
	leaseWithHistory(t, url)
	cmd := exec.Command(engineBin, "obj", "put", "stalled", "-", "--config", config)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	e := startProcess(t, cmd)
	// The pipe holds some 64 KiB: once it has taken four times that, the
	// command is reading it into its upload. Then the producer pauses,
	// keeping the pipe open.
	var given atomic.Int64
	chunk := make([]byte, 32<<10)
	_, _ = rand.Read(chunk)
	go func() {
		for given.Load() < 256<<10 {
			n, err := stdin.Write(chunk)
			given.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	waitUntil(t, "the command reads its input", func() bool { return given.Load() >= 256<<10 })
	signalEndsStalled(t, url, e, "uploads", "its input open and silent")
	if r := cli(t, nil, "obj", "get", "stalled", "--config", config); r.code != 1 || r.stdout != "" {
		t.Fatalf("the upload cut short left an object: exit %d, %d bytes", r.code, len(r.stdout))
	}
}

// A signal ends a download whose reader has stopped reading: `engine obj
// get k | consumer` with a consumer that pauses. The command exits 1 and
// releases the lease, the pipe still open. Before, its write to the full
// pipe ignored the signal, and the command held the lease until the
// consumer read again or went away.
func TestASignalEndsADownloadWhoseReaderStalls(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	config := writeConfigLease(t, url, 10)
	leaseWithHistory(t, url)
	object := make([]byte, 4<<20)
	_, _ = rand.Read(object)
	ok(t, bytes.NewReader(object), "obj", "put", "big", "--config", config)

	e := startStalledReader(t, "obj", "get", "big", "--config", config)
	signalEndsStalled(t, url, e, "downloads", "its reader silent")
}

// A signal ends a download into a FIFO that no reader opens: `engine obj
// get k pipe` with pipe made by mkfifo and its reader not yet started, or
// gone. The command exits 1, saying a signal interrupted it, and releases
// the lease. Before, its open of the FIFO, which waits for a reader,
// ignored the signal, and the command held the lease until a reader came.
func TestASignalEndsADownloadIntoAFIFONobodyReads(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	config := writeConfigLease(t, url, 10)
	leaseWithHistory(t, url)
	ok(t, strings.NewReader("the object's bytes"), "obj", "put", "k", "--config", config)
	fifo := filepath.Join(t.TempDir(), "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	e := startProcess(t, exec.Command(engineBin, "obj", "get", "k", fifo, "--config", config))
	waitUntil(t, "the command's open of the FIFO", func() bool { return inOpen(e.cmd.Process.Pid) })
	signalEndsStalled(t, url, e, "downloads", "the FIFO it writes unopened by any reader")
}

// inOpen reports whether a thread of process pid waits in the open of a
// FIFO for the other end, as the kernel names the wait.
func inOpen(pid int) bool {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/wchan", pid))
	for _, task := range tasks {
		if b, err := os.ReadFile(task); err == nil && (string(b) == "wait_for_partner" || string(b) == "fifo_open") {
			return true
		}
	}
	return false
}

// A signal ends a read command whose reader has stopped reading, as it
// ends a download: `engine kv get k | consumer` with a value larger than
// the pipe holds and a consumer that pauses. Before, the write of the
// value ignored the signal, and the command serving on its own held the
// lease until the consumer read again or went away.
func TestASignalEndsAKeyValueGetWhoseReaderStalls(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	config := writeConfigLease(t, url, 10)
	leaseWithHistory(t, url)
	value := bytes.Repeat([]byte("0123456789abcdef"), 32<<10) // 512 KiB
	ok(t, bytes.NewReader(value), "kv", "set", "big", "--config", config)

	e := startStalledReader(t, "kv", "get", "big", "--config", config)
	signalEndsStalled(t, url, e, "reads", "its reader silent")
}

// startStalledReader runs the engine with args, its output read up to the
// first byte, which proves the command under way, and no further: the
// pipe, some 64 KiB, fills.
func startStalledReader(t *testing.T, args ...string) *process {
	t.Helper()
	cmd := exec.Command(engineBin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	e := startProcess(t, cmd)
	if _, err := io.ReadFull(stdout, make([]byte, 1)); err != nil {
		t.Fatalf("no byte of output: %v\n%s", err, e.output())
	}
	return e
}

// signalEndsStalled checks that the command e, which does (uploads,
// downloads...) stalled as silent says, holds the lease, then signals it
// and checks that it exits 1 within 30 s, saying it was interrupted, and
// releases the lease.
func signalEndsStalled(t *testing.T, url string, e *process, does, silent string) {
	t.Helper()
	if rec := readLease(t, url); rec.Holder.PID != e.cmd.Process.Pid || rec.Holder.Released {
		t.Fatalf("the command %s without holding the lease: %+v", does, rec)
	}
	if err := e.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the command still runs 30s after a signal, %s:\n%s", silent, e.output())
	}
	// It says a signal ended it, not the "context canceled" of its work.
	if code := e.cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(e.output(), "engine: interrupted by a signal (terminated)") {
		t.Fatalf("exit code %d after a signal cut the command short, want 1 saying it was interrupted:\n%s", code, e.output())
	}
	if rec := readLease(t, url); !rec.Holder.Released || rec.Holder.PID != e.cmd.Process.Pid {
		t.Fatalf("after the signal the lease reads %+v, want the command's released record", rec)
	}
}
