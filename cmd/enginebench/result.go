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
	// BootRestartMS is the same start again on the same data: it finds the
	// released record of the start before and serves at once, where the
	// very first start holds the new lease key for a lease (ADR 0002).
	BootRestartMS *float64 `json:"boot_restart_ms"`
	RSSMB         *float64 `json:"rss_mb"`

	// The peers of the kernel call, from the throughput scenario: NATS's
	// own key-value bucket and object store, the engine on each backend,
	// a direct pgx client. PostgreSQL's are null without a server.
	NATSKVGetRPS              *float64 `json:"nats_kv_get_rps"`
	NATSKVPutRPS              *float64 `json:"nats_kv_put_rps"`
	KVGetRPSMemory            *float64 `json:"kv_get_rps_memory"`
	KVGetRPSSQLite            *float64 `json:"kv_get_rps_sqlite"`
	KVGetRPSPostgres          *float64 `json:"kv_get_rps_postgres"`
	PGXGetRPS                 *float64 `json:"pgx_get_rps"`
	KVSetRPSSQLite            *float64 `json:"kv_set_rps_sqlite"`
	KVSetRPSPostgres          *float64 `json:"kv_set_rps_postgres"`
	PGXSetRPS                 *float64 `json:"pgx_set_rps"`
	DocGetRPS                 *float64 `json:"doc_get_rps"`
	DocPutRPS                 *float64 `json:"doc_put_rps"`
	ObjPutMiBS                *float64 `json:"obj_put_mib_s"`
	ObjGetMiBS                *float64 `json:"obj_get_mib_s"`
	NATSObjPutMiBS            *float64 `json:"nats_obj_put_mib_s"`
	NATSObjGetMiBS            *float64 `json:"nats_obj_get_mib_s"`
	RatioSQLiteToRaw          *float64 `json:"ratio_sqlite_to_raw"`
	RatioSQLiteToNATSKV       *float64 `json:"ratio_sqlite_to_natskv"`
	RatioSQLiteSetToNATSKVPut *float64 `json:"ratio_sqlite_set_to_natskv_put"`
	RatioPGToPGX              *float64 `json:"ratio_pg_to_pgx"`
	RatioPGSetToPGXSet        *float64 `json:"ratio_pg_set_to_pgx_set"`
	// The same ratios, paired: the engine and its peer driven in turns
	// while both are up, the median of the turns' ratios (bench.paired).
	PairedKVToRaw              *float64 `json:"paired_ratio_kv_to_raw"`
	PairedSQLiteToRaw          *float64 `json:"paired_ratio_sqlite_to_raw"`
	PairedSQLiteToNATSKV       *float64 `json:"paired_ratio_sqlite_to_natskv"`
	PairedSQLiteSetToNATSKVPut *float64 `json:"paired_ratio_sqlite_set_to_natskv_put"`
	// The SQLite ones again on the embedded defaults: an engine started
	// with no configuration runs the broker in its process, and NATS's
	// bucket is on that broker (bench.embedded).
	PairedEmbeddedSQLiteToNATSKV       *float64 `json:"paired_ratio_embedded_sqlite_to_natskv"`
	PairedEmbeddedSQLiteSetToNATSKVPut *float64 `json:"paired_ratio_embedded_sqlite_set_to_natskv_put"`
	PairedPGToPGX                      *float64 `json:"paired_ratio_pg_to_pgx"`
	PairedPGSetToPGXSet                *float64 `json:"paired_ratio_pg_set_to_pgx_set"`
	// The cost of fencing tokens: the PostgreSQL keyvalue store's own Set,
	// in process, without a token and with one (the check and the write in
	// one batch, as every engine write runs).
	PGStoreSetRPS       *float64 `json:"pg_store_set_rps"`
	PGStoreSetFencedRPS *float64 `json:"pg_store_set_fenced_rps"`
	RatioFencedSet      *float64 `json:"ratio_fenced_set"`
	// Scaling is the curve: every path at 1, 8, 64 and 256 callers.
	Scaling []Point `json:"scaling"`
	// noPostgres is set when the throughput scenario left PostgreSQL out
	// for want of ENGINE_TEST_PG_DSN; a run whose PostgreSQL loads failed,
	// or that stopped before them, leaves it unset.
	noPostgres bool

	VectorResult
	JetStreamResult
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
	// PostgreSQL's figures say why they are missing, when it is for want
	// of a server.
	pg := func(v *float64, format func(*float64) string) string {
		if v == nil && r.noPostgres {
			return "absent (no ENGINE_TEST_PG_DSN)"
		}
		return format(v)
	}
	return append([]row{
		{"raw_echo_rps", f(r.RawEchoRPS), ""},
		{"kv_get_rps", f(r.KVGetRPS), ""},
		{"ratio_kv_to_raw", f2(r.RatioKVToRaw), ">= 0.7"},
		{"nats_kv_get_rps", f(r.NATSKVGetRPS), ""},
		{"nats_kv_put_rps", f(r.NATSKVPutRPS), ""},
		{"kv_get_rps_memory", f(r.KVGetRPSMemory), ""},
		{"kv_get_rps_sqlite", f(r.KVGetRPSSQLite), ""},
		{"ratio_sqlite_to_raw", f2(r.RatioSQLiteToRaw), ">= 0.6"},
		{"ratio_sqlite_to_natskv", f2(r.RatioSQLiteToNATSKV), ">= 0.7"},
		{"kv_set_rps_sqlite", f(r.KVSetRPSSQLite), ">= nats_kv_put_rps"},
		{"ratio_sqlite_set_to_natskv_put", f2(r.RatioSQLiteSetToNATSKVPut), ">= 1"},
		{"kv_get_rps_postgres", pg(r.KVGetRPSPostgres, f), ""},
		{"pgx_get_rps", pg(r.PGXGetRPS, f), ""},
		{"ratio_pg_to_pgx", pg(r.RatioPGToPGX, f2), ">= 0.8"},
		{"kv_set_rps_postgres", pg(r.KVSetRPSPostgres, f), ""},
		{"pgx_set_rps", pg(r.PGXSetRPS, f), ""},
		{"ratio_pg_set_to_pgx_set", pg(r.RatioPGSetToPGXSet, f2), ">= 0.8"},
		{"paired_ratio_kv_to_raw", f2(r.PairedKVToRaw), ">= 0.7, driven in turns"},
		{"paired_ratio_sqlite_to_raw", f2(r.PairedSQLiteToRaw), ">= 0.6, driven in turns"},
		{"paired_ratio_sqlite_to_natskv", f2(r.PairedSQLiteToNATSKV), ">= 0.7, driven in turns"},
		{"paired_ratio_sqlite_set_to_natskv_put", f2(r.PairedSQLiteSetToNATSKVPut), ">= 1, driven in turns"},
		{"paired_ratio_embedded_sqlite_to_natskv", f2(r.PairedEmbeddedSQLiteToNATSKV), ">= 0.7, driven in turns, broker in the engine"},
		{"paired_ratio_embedded_sqlite_set_to_natskv_put", f2(r.PairedEmbeddedSQLiteSetToNATSKVPut), ">= 1, driven in turns, broker in the engine"},
		{"paired_ratio_pg_to_pgx", pg(r.PairedPGToPGX, f2), ">= 0.8, driven in turns"},
		{"paired_ratio_pg_set_to_pgx_set", pg(r.PairedPGSetToPGXSet, f2), ">= 0.8, driven in turns"},
		{"pg_store_set_rps", pg(r.PGStoreSetRPS, f), ""},
		{"pg_store_set_fenced_rps", pg(r.PGStoreSetFencedRPS, f), ""},
		{"ratio_fenced_set", pg(r.RatioFencedSet, f2), "the fencing check's cost"},
		{"doc_get_rps", f(r.DocGetRPS), "beside nats_kv_get_rps"},
		{"doc_put_rps", f(r.DocPutRPS), "beside nats_kv_put_rps"},
		{"obj_put_mib_s", f(r.ObjPutMiBS), "beside nats_obj_put_mib_s"},
		{"obj_get_mib_s", f(r.ObjGetMiBS), "beside nats_obj_get_mib_s"},
		{"nats_obj_put_mib_s", f(r.NATSObjPutMiBS), ""},
		{"nats_obj_get_mib_s", f(r.NATSObjGetMiBS), ""},
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
		{"boot_restart_ms", f(r.BootRestartMS), "<= 300"},
		{"rss_mb", f(r.RSSMB), "<= 60"},
	}, slices.Concat(r.VectorResult.rows(), r.JetStreamResult.rows())...)
}

func f2(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *v)
}

// table prints the result as aligned columns, then the scaling curve.
func (r Result) table(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "field\tvalue\taim")
	for _, row := range r.rows() {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", row.field, row.value, row.aim)
	}
	if len(r.Scaling) > 0 {
		fmt.Fprintln(tw, "\npath\tcallers\tcalls/s\tp50 us\tp99 us")
		for _, p := range r.Scaling {
			fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\n", p.Path, p.Callers, p.RPS, p.P50US, p.P99US)
		}
	}
	return tw.Flush()
}
