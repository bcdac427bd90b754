package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// fields are the JSON fields the issue names, exactly.
var fields = []string{
	"raw_echo_rps", "kv_get_rps", "ratio_kv_to_raw", "raw_echo_p50_us", "raw_echo_p99_us",
	"kv_get_p50_us", "kv_get_p99_us", "handover_calls", "handover_failed", "handover_max_ms",
	"handover_gap_ms", "failover_ms", "boot_ms", "rss_mb",
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
	want := slices.Clone(fields)
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
	for _, f := range fields {
		if !strings.Contains(out.String(), f) {
			t.Errorf("the table has no row for %s:\n%s", f, out.String())
		}
	}
	if !strings.Contains(out.String(), "61.4") {
		t.Errorf("the table does not show boot_ms 61.4:\n%s", out.String())
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
}

// The command runs every scenario with real engine processes and prints
// every field.
func TestSmokeEveryFieldIsPrinted(t *testing.T) {
	if testing.Short() {
		t.Skip("runs engine processes for about 20 s")
	}
	bin := filepath.Join(t.TempDir(), "enginebench")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "-json", "-duration", "200ms")
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
	for _, f := range fields {
		if v, ok := got[f]; !ok || v == nil {
			t.Errorf("field %s is missing or null in %s\n%s", f, lines[0], stderr.String())
		}
	}
	if got["handover_failed"] != 0.0 {
		t.Errorf("handover_failed = %v, want 0\n%s", got["handover_failed"], stderr.String())
	}
}
