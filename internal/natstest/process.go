package natstest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ServerPackage is nats-server's command, built at go.mod's version.
const ServerPackage = "github.com/nats-io/nats-server/v2"

// BuildServer compiles nats-server into dir and returns the binary's path.
// Tests whose measure would count a broker inside their own process (its
// heap, its CPU) run the broker as a process of its own instead.
func BuildServer(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "nats-server")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ServerPackage).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build %s: %w\n%s", ServerPackage, err, out)
	}
	return bin, nil
}

// MainWithServer is a TestMain body: it builds nats-server into a
// temporary directory, sets *bin to it, runs the tests and removes the
// directory.
func MainWithServer(m interface{ Run() int }, bin *string) int {
	dir, err := os.MkdirTemp("", "nats-server-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if *bin, err = BuildServer(context.Background(), dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// StartProcess runs bin as one JetStream node and returns its URL once it
// answers JetStream requests; the process is killed when the test ends.
func StartProcess(tb testing.TB, bin string) string {
	tb.Helper()
	var err error
	for range 3 {
		port := freePorts(tb, 1)[0]
		url := fmt.Sprintf("nats://127.0.0.1:%d", port)
		stop := runProcess(tb, bin, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", tb.TempDir())
		if err = awaitJetStream(url, 1); err == nil {
			return url
		}
		stop()
	}
	tb.Fatalf("nats-server process: %v", err)
	return ""
}

// StartClusterProcesses runs bin as a three-node JetStream cluster and
// returns the URLs of every node once a stream of three replicas can be
// made; the processes are killed when the test ends.
func StartClusterProcesses(tb testing.TB, bin string) string {
	tb.Helper()
	var err error
	for range 3 {
		ports := freePorts(tb, 6)
		var routes, urls []string
		for i := range 3 {
			routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[3+i]))
			urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
		}
		var stops []func()
		for i := range 3 {
			stops = append(stops, runProcess(tb, bin, "-n", fmt.Sprintf("n%d", i+1), "-a", "127.0.0.1",
				"-p", strconv.Itoa(ports[i]), "-js", "-sd", tb.TempDir(), "--cluster_name", "engine-test",
				"--cluster", routes[i], "--routes", strings.Join(routes, ",")))
		}
		url := strings.Join(urls, ",")
		if err = awaitJetStream(url, 3); err == nil {
			return url
		}
		for _, stop := range stops {
			stop()
		}
	}
	tb.Fatalf("nats-server cluster processes: %v", err)
	return ""
}

// runProcess starts bin with args; the returned stop, also run when the
// test ends, kills it and waits for it.
func runProcess(tb testing.TB, bin string, args ...string) func() {
	tb.Helper()
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", bin, err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}
	tb.Cleanup(stop)
	return stop
}

// awaitJetStream waits until a stream of the given replicas can be made
// and removed: then the meta leader sees enough peers.
func awaitJetStream(url string, replicas int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		if last = tryStream(ctx, url, replicas); last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.Join(errors.New("JetStream not ready in 60s"), last)
}

func tryStream(ctx context.Context, url string, replicas int) error {
	nc, err := nats.Connect(url, nats.Timeout(time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := js.CreateStream(actx, jetstream.StreamConfig{Name: "NATSTEST_READY", Subjects: []string{"natstest.ready"}, Replicas: replicas}); err != nil {
		return err
	}
	return js.DeleteStream(actx, "NATSTEST_READY")
}
