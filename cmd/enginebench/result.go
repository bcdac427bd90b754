package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"
	"time"
)

// Result is one run of the bench: the fields of the JSON line, each null
// when its scenario did not run.
type Result struct {
	RawEchoRPS     *float64 `json:"raw_echo_rps"`
	KVGetRPS       *float64 `json:"kv_get_rps"`
	RatioKVToRaw   *float64 `json:"ratio_kv_to_raw"`
	RawEchoP50US   *float64 `json:"raw_echo_p50_us"`
	RawEchoP99US   *float64 `json:"raw_echo_p99_us"`
	KVGetP50US     *float64 `json:"kv_get_p50_us"`
	KVGetP99US     *float64 `json:"kv_get_p99_us"`
	HandoverCalls  *int64   `json:"handover_calls"`
	HandoverFailed *int64   `json:"handover_failed"`
	HandoverMaxMS  *float64 `json:"handover_max_ms"`
	HandoverGapMS  *float64 `json:"handover_gap_ms"`
	FailoverMS     *float64 `json:"failover_ms"`
	BootMS         *float64 `json:"boot_ms"`
	RSSMB          *float64 `json:"rss_mb"`
}

func ptr[T any](v T) *T { return &v }

// percentile is the nearest-rank percentile of sorted durations: the
// smallest value with at least p percent of the values at or below it.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// latencies sorts ds and returns its p50 and p99 in microseconds.
func latencies(ds []time.Duration) (p50, p99 float64) {
	slices.Sort(ds)
	return micros(percentile(ds, 50)), micros(percentile(ds, 99))
}

func micros(d time.Duration) float64 { return round(float64(d) / float64(time.Microsecond)) }

func millis(d time.Duration) float64 { return round(float64(d) / float64(time.Millisecond)) }

// round keeps one decimal: the figures are noisy beyond that.
func round(v float64) float64 { return math.Round(v*10) / 10 }

// row is one line of the table: a field, its value, the aim of the issue.
type row struct {
	field string
	value string
	aim   string
}

func (r Result) rows() []row {
	f := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf("%.1f", *v)
	}
	i := func(v *int64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprint(*v)
	}
	return []row{
		{"raw_echo_rps", f(r.RawEchoRPS), ""},
		{"kv_get_rps", f(r.KVGetRPS), ""},
		{"ratio_kv_to_raw", f2(r.RatioKVToRaw), ">= 0.6"},
		{"raw_echo_p50_us", f(r.RawEchoP50US), ""},
		{"raw_echo_p99_us", f(r.RawEchoP99US), ""},
		{"kv_get_p50_us", f(r.KVGetP50US), ""},
		{"kv_get_p99_us", f(r.KVGetP99US), ""},
		{"handover_calls", i(r.HandoverCalls), ">= 20000"},
		{"handover_failed", i(r.HandoverFailed), "= 0"},
		{"handover_max_ms", f(r.HandoverMaxMS), "<= 100"},
		{"handover_gap_ms", f(r.HandoverGapMS), ""},
		{"failover_ms", f(r.FailoverMS), fmt.Sprintf("<= %d (lease + 500)", failoverLease.Milliseconds()+500)},
		{"boot_ms", f(r.BootMS), "<= 300"},
		{"rss_mb", f(r.RSSMB), "<= 60"},
	}
}

func f2(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *v)
}

// table prints the result as aligned columns.
func (r Result) table(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "field\tvalue\taim")
	for _, row := range r.rows() {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", row.field, row.value, row.aim)
	}
	return tw.Flush()
}
