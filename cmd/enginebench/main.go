// Command enginebench measures the engine on this machine: real engine
// processes on loopback, an embedded broker, every scenario side by side in
// one run.
//
//	enginebench [-duration 10s] [-json] [-plot curve.svg] [-scenarios throughput,handover,failover,boot,vector,jetstream]
//
// The vector200k scenario (200,000 vectors through the HNSW index on each
// vector adapter) takes several minutes and runs only when named.
//
// It prints a table of the figures beside the aims, or with -json one
// JSON object on one line; notes on how a figure was taken go to standard
// error. -plot draws the scaling curve (every path at 1, 8, 64 and 256
// callers) as an SVG chart. It stops every process it started.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
)

// Scenarios, in the order they run.
var scenarios = []string{"throughput", "handover", "failover", "boot", "vector", "vector200k", "jetstream"}

// defaultScenarios run when -scenarios is not given: vector200k loads and
// indexes 200,000 vectors on each adapter, several minutes on two cores.
var defaultScenarios = []string{"throughput", "handover", "failover", "boot", "vector", "jetstream"}

// The raw echo's responder is this command again, started with echoEnv
// naming the broker, so the echo is answered from another process as the
// engine's calls are.
const (
	echoEnv     = "ENGINEBENCH_ECHO_URL"
	echoSubject = "bench.echo"
)

func main() {
	if url := os.Getenv(echoEnv); url != "" {
		os.Exit(echo(url))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("enginebench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	duration := fs.Duration("duration", 10*time.Second, "how long each load runs")
	asJSON := fs.Bool("json", false, "print one JSON object on one line instead of a table")
	list := fs.String("scenarios", strings.Join(defaultScenarios, ","), "comma-separated scenarios to run, from "+strings.Join(scenarios, ","))
	plotFile := fs.String("plot", "", "draw the scaling curve of the throughput scenario to this SVG file")
	lease := fs.Int("lease-seconds", defaultLease, "the lease of the engines the throughput, boot, vector and jetstream scenarios start; "+
		"an engine that makes the lease key on a new broker holds it this long before it serves")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	chosen, err := parseScenarios(*list)
	if err != nil || *duration <= 0 || *lease < 1 || fs.NArg() > 0 {
		fmt.Fprintf(stderr, "enginebench: want -duration > 0, -lease-seconds >= 1 and -scenarios from %s\n", strings.Join(scenarios, ","))
		return 2
	}
	l, err := newLab()
	if err != nil {
		fmt.Fprintf(stderr, "enginebench: %v\n", err)
		return 1
	}
	defer l.stop()
	fmt.Fprintln(stderr, "enginebench: building the engine")
	if err := l.buildEngine(ctx); err != nil {
		fmt.Fprintf(stderr, "enginebench: %v\n", err)
		return 1
	}
	b := &bench{lab: l, duration: *duration, lease: *lease}
	steps := map[string]func(context.Context) error{
		"throughput": b.throughput, "handover": b.handover, "failover": b.failover, "boot": b.boot,
		"vector": b.vector, "vector200k": b.vector200k, "jetstream": b.jetstream,
	}
	code := 0
	for _, name := range chosen {
		fmt.Fprintf(stderr, "enginebench: %s\n", name)
		if err := steps[name](ctx); err != nil {
			fmt.Fprintf(stderr, "enginebench: %s: %v\n", name, err)
			code = 1
			if ctx.Err() != nil {
				break
			}
		}
	}
	if *plotFile != "" {
		if err := savePlot(*plotFile, b.result.Scaling); err != nil {
			fmt.Fprintf(stderr, "enginebench: plot: %v\n", err)
			code = 1
		}
	}
	if *asJSON {
		for _, n := range b.notes {
			fmt.Fprintf(stderr, "note: %s\n", n)
		}
		line, err := json.Marshal(b.result)
		if err != nil {
			fmt.Fprintf(stderr, "enginebench: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "%s\n", line)
		return code
	}
	fmt.Fprintf(stdout, "enginebench: %d callers, %v per load, %d CPUs\n", callers, *duration, runtime.NumCPU())
	if err := b.result.table(stdout); err != nil {
		return 1
	}
	for _, n := range b.notes {
		fmt.Fprintf(stdout, "note: %s\n", n)
	}
	return code
}

// savePlot writes the scaling curve's chart to path.
func savePlot(path string, points []Point) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := writePlot(f, points); err != nil {
		_ = f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

func parseScenarios(list string) ([]string, error) {
	var out []string
	for name := range strings.SplitSeq(list, ",") {
		name = strings.TrimSpace(name)
		if !slices.Contains(scenarios, name) {
			return nil, fmt.Errorf("unknown scenario %q", name)
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	// Scenarios run in their own order, whatever the list's.
	slices.SortFunc(out, func(a, b string) int { return slices.Index(scenarios, a) - slices.Index(scenarios, b) })
	return out, nil
}

// echo answers every request on echoSubject with its body until a signal
// comes.
func echo(url string) int {
	nc, err := nats.Connect(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer nc.Close()
	if _, err := nc.QueueSubscribe(echoSubject, "bench", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := nc.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return 0
}
