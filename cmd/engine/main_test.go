package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/lease/jetstream"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/enginetest"
	"github.com/abi-engine/engine/internal/natstest"
)

// These tests run the engine as real processes against a real nats-server:
// what happens on a signal or a refusal is the process's behaviour.

var engineBin string

func TestMain(m *testing.M) { os.Exit(enginetest.Main(m, &engineBin)) }

// process is a running engine whose log lines the test can wait for.
type process struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	log  bytes.Buffer
	line chan string
	done chan struct{}
}

func writeConfig(t *testing.T, url string) string {
	t.Helper()
	return writeConfigLease(t, url, 1)
}

// writeConfigLease is writeConfig with a lease of its own: a test that
// moves megabytes through a process under the race detector gives it a
// longer lease, so a starved renewal does not fence it mid-transfer.
func writeConfigLease(t *testing.T, url string, leaseSeconds int) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "engine.yaml")
	// Port 0: engines of one test, and tests running at once, each listen
	// on a port of their own.
	yaml := fmt.Sprintf("nats:\n  url: %s\n  engine:\n    lease_seconds: %d\n    drain_seconds: 1\nhttp:\n  listen: 127.0.0.1:0\ndata_dir: %s\n", url, leaseSeconds, filepath.Join(dir, "data"))
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func startEngine(t *testing.T, config string, env ...string) *process {
	t.Helper()
	cmd := exec.Command(engineBin, "--config", config)
	cmd.Env = append(os.Environ(), env...)
	return startProcess(t, cmd)
}

// startProcess starts cmd, an engine however it is started, and follows
// its log; the test's end kills it if it still runs.
func startProcess(t *testing.T, cmd *exec.Cmd) *process {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, line: make(chan string, 1024), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.log.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.line <- sc.Text():
			default:
			}
		}
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	return p
}

func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// waitLog waits for a log line containing s.
func (p *process) waitLog(t *testing.T, s string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l := <-p.line:
			if strings.Contains(l, s) {
				return
			}
		case <-p.done:
			if strings.Contains(p.output(), s) {
				return
			}
			t.Fatalf("engine exited before logging %q:\n%s", s, p.output())
		case <-deadline:
			t.Fatalf("engine did not log %q in 30s:\n%s", s, p.output())
		}
	}
}

// exitCode waits for the process to end.
func (p *process) exitCode(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(60 * time.Second):
		t.Fatalf("engine did not exit in 60s:\n%s", p.output())
	}
	return -1
}

func readLease(t *testing.T, url string) domain.Record {
	t.Helper()
	l, err := jetstream.Open(t.Context(), natstest.Connect(t, url), jetstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := l.Read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func TestASecondEngineFailsNamingTheFirst(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	config := writeConfig(t, url)
	first := startEngine(t, config)
	first.waitLog(t, "state=serving")
	holder := readLease(t, url).Holder

	second := startEngine(t, config)
	if code := second.exitCode(t); code == 0 {
		t.Fatalf("second engine exited 0:\n%s", second.output())
	}
	out := second.output()
	for _, want := range []string{"already serves", holder.InstanceID, "host " + holder.Host, fmt.Sprintf("pid %d", first.cmd.Process.Pid)} {
		if !strings.Contains(out, want) {
			t.Errorf("refusal does not name %q:\n%s", want, out)
		}
	}
	if rec := readLease(t, url); rec.Holder.InstanceID != holder.InstanceID {
		t.Fatalf("the refused engine changed the lease holder to %s", rec.Holder)
	}
}

func TestAnInterruptReleasesTheLeaseAndExitsZero(t *testing.T) {
	stopsCleanlyOn(t, syscall.SIGINT)
}

// A hangup (a closed terminal, an ssh session gone) stops the engine as
// SIGTERM does; by default it would kill it holding the lease, so a
// standby waited a whole lease and calls in progress were cut.
func TestAHangupReleasesTheLeaseAndExitsZero(t *testing.T) {
	stopsCleanlyOn(t, syscall.SIGHUP)
}

// An engine started with SIGHUP ignored (nohup, or a shell's trap "" HUP)
// is meant to outlive its terminal: a hangup leaves it serving. Asking for
// SIGHUP would un-ignore it. It still stops cleanly on SIGTERM.
func TestAnEngineStartedUnderNohupOutlivesAHangup(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	cmd := exec.Command("sh", "-c", `trap "" HUP; exec "$0" --config "$1"`, engineBin, writeConfig(t, url))
	e := startProcess(t, cmd)
	e.waitLog(t, "state=serving")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// What does not happen takes a while to see: the engine's stop would
	// begin at once.
	select {
	case <-e.done:
		t.Fatalf("an engine started with SIGHUP ignored stopped on a hangup (%s):\n%s", cmd.ProcessState, e.output())
	case <-time.After(2 * time.Second):
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := e.exitCode(t); code != 0 {
		t.Fatalf("exit code %d after SIGTERM:\n%s", code, e.output())
	}
}

// stopsCleanlyOn sends sig to a serving engine, which must release the
// lease and exit 0.
func stopsCleanlyOn(t *testing.T, sig syscall.Signal) {
	t.Helper()
	url := natstest.StartServer(t).ClientURL()
	config := writeConfig(t, url)
	// A runner started under nohup ignores SIGHUP, and its children would
	// too; a signal this process asks for starts at its default in them.
	asked := make(chan os.Signal, 1)
	signal.Notify(asked, sig)
	e := startEngine(t, config)
	signal.Stop(asked)
	e.waitLog(t, "state=serving")
	if err := e.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	if code := e.exitCode(t); code != 0 {
		t.Fatalf("exit code %d (%s) after %v:\n%s", code, e.cmd.ProcessState, sig, e.output())
	}
	rec := readLease(t, url)
	if !rec.Present || !rec.Holder.Released || rec.Holder.PID != e.cmd.Process.Pid {
		t.Fatalf("after %v the lease reads %+v, want the engine's released record", sig, rec)
	}
}
