//go:build unix

// Unix only: the tests signal their own process with syscall.Kill.

package enginecmd

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/fx"

	leasejs "github.com/abi-engine/engine/adapters/secondary/lease/jetstream"
	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/internal/natstest"
)

// gate is a module pair's shared state: the first gate module to start
// starts and then holds its stop until released; the second holds its
// start until the start is cut short.
type gate struct {
	starts   atomic.Int32
	hanging  chan struct{} // closed when the second start hangs
	stopping chan struct{} // closed when the first stop begins
	release  chan struct{} // closed to let the stop return
	stopped  chan struct{} // closed when the stop has returned
	once     sync.Once
}

type gateModule struct{ g *gate }

func (gateModule) Name() string    { return "gate" }
func (gateModule) Needs() []string { return nil }

func (m gateModule) Start(ctx context.Context, _ app.ModuleEnv) error {
	if m.g.starts.Add(1) == 1 {
		return nil
	}
	close(m.g.hanging)
	<-ctx.Done()
	return ctx.Err()
}

func (m gateModule) Stop(context.Context) error {
	m.g.once.Do(func() { close(m.g.stopping) })
	<-m.g.release
	close(m.g.stopped)
	return nil
}

// A second signal while a start cut short by the first still stops what it
// had started ends the process at once with exit code 1, as a second one
// does while a started engine drains. Before, the command read no signal
// until the start's clean-up returned, which may wait out drain_seconds on
// a module's stop, so the operator could not stop it but with SIGKILL.
func TestASecondSignalWhileAnInterruptedStartStopsEndsServeAtOnce(t *testing.T) {
	srv := natstest.StartServer(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "engine.yaml")
	yaml := fmt.Sprintf("nats:\n  url: %s\n  engine: {lease_seconds: 1, drain_seconds: 600, standby_timeout_seconds: 900}\nhttp: {listen: \"off\"}\ndata_dir: %s\n",
		srv.ClientURL(), filepath.Join(dir, "data"))
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ABI_ENGINE_ROLE", "")
	t.Setenv("GOGC", "100")
	g := &gate{hanging: make(chan struct{}), stopping: make(chan struct{}), release: make(chan struct{}), stopped: make(chan struct{})}
	t.Cleanup(func() {
		close(g.release)
		select {
		case <-g.stopped:
		case <-time.After(time.Minute):
			t.Error("the module's stop never returned")
		}
	})
	newGate := func() gateModule { return gateModule{g} }
	o := Options{Modules: []fx.Option{
		app.AsModule(newGate),
		fx.Provide(fx.Annotate(newGate, fx.As(new(app.Module)), fx.ResultTags(`group:"modules"`))),
	}}
	code := make(chan int, 1)
	go func() { code <- Run([]string{"serve", "--config", path}, io.Discard, io.Discard, o) }()
	waitFor(t, g.hanging, "the second module's start")
	// The command has its signal handler in place: it set it before the
	// start, and the start is under way.
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, g.stopping, "the first module's stop, as the start cut short cleans up")
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-code:
		if c != exitError {
			t.Fatalf("serve = %d after a second signal, want %d", c, exitError)
		}
	case <-time.After(time.Minute):
		t.Fatal("serve still runs a minute after a second signal, waiting on the clean-up of its start")
	}
}

func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(2 * time.Minute):
		t.Fatalf("no %s within two minutes", what)
	}
}

// A stop the process asks for itself, through fx.Shutdowner with an exit
// code (as the engine does when its NATS connection closes for good), ends
// serve with that code after a clean stop: the lease is released.
func TestAShutdownAskedInTheProcessEndsServeWithItsCode(t *testing.T) {
	srv := natstest.StartServer(t)
	ask := make(chan struct{})
	o := Options{Modules: []fx.Option{fx.Invoke(func(s fx.Shutdowner) {
		go func() {
			<-ask
			_ = s.Shutdown(fx.ExitCode(3))
		}()
	})}}
	s := serveInProcess(t, shortLeaseConfig(t, srv.ClientURL()), o)
	close(ask)
	if c := s.exitCode(t); c != 3 {
		t.Fatalf("serve = %d after a shutdown asked with code 3:\n%s", c, s.out.String())
	}
	l, err := leasejs.Open(t.Context(), natstest.Connect(t, srv.ClientURL()), leasejs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := l.Read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Present || !rec.Holder.Released {
		t.Fatalf("after the asked stop the lease reads %+v, want a released record", rec)
	}
}

// shortLeaseConfig writes a configuration for an engine on url with a
// lease of a second and no HTTP, and returns its path.
func shortLeaseConfig(t *testing.T, url string) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "engine.yaml")
	yaml := fmt.Sprintf("nats:\n  url: %s\n  engine: {lease_seconds: 1}\nhttp: {listen: \"off\"}\ndata_dir: %s\n",
		url, filepath.Join(dir, "data"))
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ABI_ENGINE_ROLE", "")
	t.Setenv("GOGC", "100")
	return path
}

// served is serve run in this process: its exit code once it returns,
// and its log.
type served struct {
	code    chan int
	scanned chan struct{}
	out     strings.Builder // read once scanned is closed
}

// serveInProcess runs serve with the configuration at path and returns
// once the engine serves.
func serveInProcess(t *testing.T, path string, o Options) *served {
	t.Helper()
	s := &served{code: make(chan int, 1), scanned: make(chan struct{})}
	logs, w := io.Pipe()
	serving := make(chan struct{})
	var once sync.Once
	go func() {
		defer close(s.scanned)
		sc := bufio.NewScanner(logs)
		for sc.Scan() {
			s.out.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "state=serving") {
				once.Do(func() { close(serving) })
			}
		}
	}()
	go func() {
		s.code <- Run([]string{"serve", "--config", path}, io.Discard, w, o)
		_ = w.Close()
	}()
	waitFor(t, serving, "serving engine")
	return s
}

// exitCode waits for serve to return, and its log to be read.
func (s *served) exitCode(t *testing.T) int {
	t.Helper()
	select {
	case c := <-s.code:
		<-s.scanned
		return c
	case <-time.After(time.Minute):
		t.Fatal("serve still runs a minute after it was asked to stop")
		return -1
	}
}
