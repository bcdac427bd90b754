package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// fields are the JSON fields the issue names, exactly, and the paired ratios.
var fields = []string{
	"raw_echo_rps", "kv_get_rps", "ratio_kv_to_raw", "raw_echo_p50_us", "raw_echo_p99_us",
	"kv_get_p50_us", "kv_get_p99_us", "handover_calls", "handover_failed", "handover_max_ms",
	"handover_gap_ms", "failover_ms", "boot_ms", "boot_restart_ms", "rss_mb",
	"nats_kv_get_rps", "nats_kv_put_rps", "kv_get_rps_memory", "kv_get_rps_sqlite", "kv_get_rps_postgres",
	"pgx_get_rps", "kv_set_rps_sqlite", "kv_set_rps_postgres", "pgx_set_rps", "doc_get_rps", "doc_put_rps",
	"obj_put_mib_s", "obj_get_mib_s", "nats_obj_put_mib_s", "nats_obj_get_mib_s", "ratio_sqlite_to_raw",
	"ratio_sqlite_to_natskv", "ratio_sqlite_set_to_natskv_put", "ratio_pg_to_pgx", "ratio_pg_set_to_pgx_set",
	"pg_store_set_rps", "pg_store_set_fenced_rps", "ratio_fenced_set", "scaling",
	"paired_ratio_kv_to_raw", "paired_ratio_sqlite_to_raw", "paired_ratio_sqlite_to_natskv",
	"paired_ratio_sqlite_set_to_natskv_put", "paired_ratio_embedded_sqlite_to_natskv", "paired_ratio_embedded_sqlite_set_to_natskv_put",
	"paired_ratio_pg_to_pgx", "paired_ratio_pg_set_to_pgx_set",
}

// embeddedFields are null, with a note, when the ports of the embedded
// defaults are taken.
var embeddedFields = []string{"paired_ratio_embedded_sqlite_to_natskv", "paired_ratio_embedded_sqlite_set_to_natskv_put"}

// postgresFields are null when no PostgreSQL server is given.
var postgresFields = []string{
	"kv_get_rps_postgres", "pgx_get_rps", "kv_set_rps_postgres", "pgx_set_rps", "ratio_pg_to_pgx", "ratio_pg_set_to_pgx_set",
	"pg_store_set_rps", "pg_store_set_fenced_rps", "ratio_fenced_set",
	"paired_ratio_pg_to_pgx", "paired_ratio_pg_set_to_pgx_set",
}

func TestPercentile(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		out := make([]time.Duration, len(ns))
		for i, n := range ns {
			out[i] = time.Duration(n) * time.Millisecond
		}
		return out
	}
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}
	cases := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"Empty", nil, 50, 0},
		{"One", ms(7), 99, 7 * time.Millisecond},
		{"MedianOfFour", ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{"MedianOfFive", ms(1, 2, 3, 4, 5), 50, 3 * time.Millisecond},
		{"P99OfHundred", hundred, 99, 99 * time.Millisecond},
		{"P100IsTheMax", hundred, 100, 100 * time.Millisecond},
		{"P0IsTheMin", hundred, 0, time.Millisecond},
		{"P99OfTenIsTheMax", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, 10 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := percentile(c.sorted, c.p); got != c.want {
				t.Fatalf("percentile(%v, %v) = %v, want %v", c.sorted, c.p, got, c.want)
			}
		})
	}
}

func TestLatenciesSortAndReportMicroseconds(t *testing.T) {
	ds := []time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond}
	p50, p99 := latencies(ds)
	if p50 != 2000 || p99 != 3000 {
		t.Fatalf("latencies = %v, %v; want 2000, 3000", p50, p99)
	}
}

func TestJSONFieldsAreTheIssues(t *testing.T) {
	b, err := json.Marshal(Result{})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(got))
	for k, v := range got {
		keys = append(keys, k)
		if v != nil {
			t.Errorf("%s of an empty result is %v, want null", k, v)
		}
	}
	want := slices.Concat(fields, vectorFields, vector200kFields, jetstreamFields)
	slices.Sort(keys)
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Fatalf("JSON fields %v, want exactly %v", keys, want)
	}
}

func TestTheTableHasARowPerField(t *testing.T) {
	var out bytes.Buffer
	if err := (Result{BootMS: ptr(61.4)}).table(&out); err != nil {
		t.Fatal(err)
	}
	for _, f := range slices.Concat(fields, vectorFields, vector200kFields, jetstreamFields) {
		if f == "scaling" {
			continue // a section of its own, below the rows, when measured
		}
		if !strings.Contains(out.String(), f) {
			t.Errorf("the table has no row for %s:\n%s", f, out.String())
		}
	}
	if !strings.Contains(out.String(), "61.4") {
		t.Errorf("the table does not show boot_ms 61.4:\n%s", out.String())
	}
}

func TestThePlotDrawsEveryPath(t *testing.T) {
	var points []Point
	for i, path := range []string{pathRaw, pathNATSKV, pathMemory} {
		for _, n := range curveCallers {
			points = append(points, Point{Path: path, Callers: n, RPS: float64(1000 * n * (i + 1)), P50US: 100, P99US: float64(300 * n)})
		}
	}
	var svg bytes.Buffer
	if err := writePlot(&svg, points); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg", pathRaw, pathNATSKV, pathMemory, "calls/s", "p99 (ms)", "256"} {
		if !strings.Contains(svg.String(), want) {
			t.Errorf("the chart does not show %q", want)
		}
	}
	if err := writePlot(&svg, nil); err == nil {
		t.Error("a chart without points was drawn")
	}
}

func TestScenarios(t *testing.T) {
	got, err := parseScenarios("boot, throughput,boot")
	if err != nil || !slices.Equal(got, []string{"throughput", "boot"}) {
		t.Fatalf("parseScenarios = %v, %v; want throughput then boot", got, err)
	}
	if _, err := parseScenarios("throughput,nope"); err == nil {
		t.Fatal("an unknown scenario was accepted")
	}
	var stderr bytes.Buffer
	if code := run(t.Context(), []string{"-scenarios", "nope"}, io.Discard, &stderr); code != 2 {
		t.Fatalf("run with an unknown scenario = %d, want 2: %s", code, stderr.String())
	}
	if code := run(t.Context(), []string{"-duration", "0s"}, io.Discard, &stderr); code != 2 {
		t.Fatalf("run with a zero duration = %d, want 2", code)
	}
	if code := run(t.Context(), []string{"-lease-seconds", "0"}, io.Discard, &stderr); code != 2 {
		t.Fatalf("run with a zero lease = %d, want 2", code)
	}
}

// The command runs every scenario with real engine processes and prints
// every field.
func TestSmokeEveryFieldIsPrinted(t *testing.T) {
	if testing.Short() {
		t.Skip("runs engine processes for about a minute")
	}
	bin := filepath.Join(t.TempDir(), "enginebench")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	chart := filepath.Join(t.TempDir(), "curve.svg")
	// Each engine that makes the lease key on a broker of its own holds it
	// a lease before it serves: a short lease keeps the run to a minute.
	cmd := exec.CommandContext(ctx, bin, "-json", "-duration", "200ms", "-lease-seconds", "3", "-plot", chart)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("enginebench: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one JSON line, got %d:\n%s", len(lines), stdout.String())
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
		t.Fatalf("%v: %s", err, lines[0])
	}
	withPG := os.Getenv("ENGINE_TEST_PG_DSN") != ""
	for _, f := range slices.Concat(fields, vectorFields, jetstreamFields) {
		v, ok := got[f]
		switch {
		case !ok:
			t.Errorf("field %s is missing in %s", f, lines[0])
		case v == nil && slices.Contains(embeddedFields, f) && strings.Contains(stderr.String(), "embedded figures absent"):
			t.Logf("field %s is null, as the note says:\n%s", f, stderr.String())
		case v == nil && (withPG || !slices.Contains(postgresFields, f)):
			t.Errorf("field %s is null in %s\n%s", f, lines[0], stderr.String())
		case v != nil && !withPG && slices.Contains(postgresFields, f):
			t.Errorf("field %s is %v without a PostgreSQL server, want null", f, v)
		}
	}
	if !withPG && !strings.Contains(stderr.String(), "PostgreSQL figures absent") {
		t.Errorf("no note says the PostgreSQL figures are absent:\n%s", stderr.String())
	}
	points, _ := got["scaling"].([]any)
	paths := 4
	if withPG {
		paths = 5
	}
	if len(points) != paths*len(curveCallers) {
		t.Errorf("scaling has %d points, want %d paths at %v callers: %v", len(points), paths, curveCallers, got["scaling"])
	}
	svg, err := os.ReadFile(chart)
	if err != nil || !bytes.Contains(svg, []byte("<svg")) {
		t.Errorf("-plot wrote no SVG chart: %v", err)
	}
	if got["handover_failed"] != 0.0 {
		t.Errorf("handover_failed = %v, want 0\n%s", got["handover_failed"], stderr.String())
	}
}

// The bench finds an engine's HTTP API, bound to port 0, by its log line,
// as the engine's text logger writes it.
func TestListenAddrIsReadFromTheLog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	if got := listenAddr(buf.String()); got != "" {
		t.Fatalf("listenAddr of an empty log = %q", got)
	}
	log.Info("engine serving", "state", "serving")
	log.Info("HTTP API listening", "addr", "127.0.0.1:40123", "token", false)
	if got := listenAddr(buf.String()); got != "127.0.0.1:40123" {
		t.Fatalf("listenAddr = %q, want 127.0.0.1:40123; log:\n%s", got, buf.String())
	}
}

// The table says PostgreSQL's figures are absent for want of
// ENGINE_TEST_PG_DSN only when that is why: a run whose PostgreSQL loads
// failed, or that stopped before them, had its server named or never got
// that far, and shows "-".
func TestTheTableBlamesNoMissingDSNForFiguresThatFailed(t *testing.T) {
	var out bytes.Buffer
	if err := (Result{KVGetRPSMemory: ptr(25000.0)}).table(&out); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "ENGINE_TEST_PG_DSN") {
		t.Errorf("a run that was not told of a missing ENGINE_TEST_PG_DSN blames one:\n%s", out.String())
	}
}

// Without ENGINE_TEST_PG_DSN, every PostgreSQL row of the table says so.
func TestTheTableSaysPostgreSQLIsAbsentWithoutADSN(t *testing.T) {
	var out bytes.Buffer
	if err := (Result{KVGetRPSMemory: ptr(25000.0), noPostgres: true}).table(&out); err != nil {
		t.Fatal(err)
	}
	for _, f := range postgresFields {
		if !regexp.MustCompile(`(?m)^` + f + ` +absent \(no ENGINE_TEST_PG_DSN\)`).MatchString(out.String()) {
			t.Errorf("the row of %s does not say ENGINE_TEST_PG_DSN is missing:\n%s", f, out.String())
		}
	}
}
