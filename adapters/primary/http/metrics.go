package httpapi

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/abi-engine/engine/domain"
)

// ViaHTTP is the "via" label of calls that came through this HTTP API; the
// label tells them from calls the kernel services took on NATS.
const ViaHTTP = "http"

// Directions of transfer bytes, the "direction" label, as the engine sees
// them: in is stored, out is read.
const (
	DirectionIn  = "in"
	DirectionOut = "out"
)

// states are the lease states the abi_engine_lease_state gauge reports.
var states = []domain.State{
	domain.StateIdle, domain.StateStandby, domain.StateServing,
	domain.StateFenced, domain.StateLost, domain.StateReleased,
}

// Metrics are the engine's Prometheus metrics, on a registry of their own
// with the Go runtime and process collectors.
type Metrics struct {
	reg            *prometheus.Registry
	leaseState     *prometheus.GaugeVec
	transitions    *prometheus.CounterVec
	renewals       *prometheus.CounterVec
	renewalSeconds prometheus.Histogram
	fencings       prometheus.Counter
	handovers      prometheus.Counter
	standbyWait    prometheus.Histogram
	calls          *prometheus.CounterVec
	callSeconds    *prometheus.HistogramVec
	sessionsOpen   *prometheus.GaugeVec
	transferBytes  *prometheus.CounterVec
	// callSeries keeps the series of each way in, service, operation and
	// code once found: finding one by its labels hashes them under a
	// lock, several hundred nanoseconds on every call. The label values
	// come from the engine's own routes and endpoints, so they are few.
	callSeries sync.Map // callLabels -> *callSeries

	mu           sync.Mutex
	standbySince time.Time
}

// NewMetrics registers every metric.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		leaseState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "abi_engine_lease_state",
			Help: "1 for the lease state this engine is in, 0 for the others; all 0 for a client engine.",
		}, []string{"state"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "abi_engine_lease_transitions_total",
			Help: "Lease state transitions of this engine.",
		}, []string{"from", "to"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "abi_engine_lease_renewals_total",
			Help: "Lease renewal attempts of this engine, by result (ok, failed).",
		}, []string{"result"}),
		renewalSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "abi_engine_lease_renewal_duration_seconds",
			Help:    "How long lease renewals took, from send to answer or cut-off.",
			Buckets: []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5},
		}),
		fencings: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "abi_engine_lease_fencings_total",
			Help: "Times this engine stopped serving because no renewal succeeded for half a lease, or because it holds a lease key someone deleted, which it made anew, or because its lease store refused to make that key anew for a setting of the store.",
		}),
		handovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "abi_engine_lease_handovers_total",
			Help: "Times this engine took the lease over from another engine: as a standby, or from a silent holder.",
		}),
		standbyWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "abi_engine_standby_wait_seconds",
			Help:    "How long this engine stood by before it served or gave up.",
			Buckets: []float64{0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900, 1800},
		}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "abi_engine_calls_total",
			Help: "Service calls by way in, service, operation and status code.",
		}, []string{"via", "service", "operation", "code"}),
		callSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "abi_engine_call_duration_seconds",
			Help:    "Service call latency by way in, service and operation.",
			Buckets: prometheus.DefBuckets,
		}, []string{"via", "service", "operation"}),
		sessionsOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "abi_engine_sessions_open",
			Help: "Object transfers in progress, by way in.",
		}, []string{"via"}),
		transferBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "abi_engine_transfer_bytes_total",
			Help: "Object bytes moved, by way in and direction (in: stored, out: read).",
		}, []string{"via", "direction"}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.leaseState, m.transitions, m.renewals, m.renewalSeconds, m.fencings, m.handovers, m.standbyWait,
		m.calls, m.callSeconds, m.sessionsOpen, m.transferBytes,
	)
	return m
}

// Registry is where the metrics are, for more collectors or a test.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Observe records a lease transition; pass it to the engine's Observe. It
// never blocks.
func (m *Metrics) Observe(tr domain.Transition) {
	for _, s := range states {
		v := 0.0
		if s == tr.To {
			v = 1
		}
		m.leaseState.WithLabelValues(s.String()).Set(v)
	}
	m.transitions.WithLabelValues(tr.From.String(), tr.To.String()).Inc()
	if tr.To == domain.StateFenced {
		m.fencings.Inc()
	}
	// A handover: a standby that took the lease, or a silent holder's lease
	// taken over.
	if tr.To == domain.StateServing && (tr.From == domain.StateStandby || tr.Previous.InstanceID != "" && !tr.Previous.Released) {
		m.handovers.Inc()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case tr.To == domain.StateStandby:
		m.standbySince = time.Now()
	case tr.From == domain.StateStandby && !m.standbySince.IsZero():
		m.standbyWait.Observe(time.Since(m.standbySince).Seconds())
		m.standbySince = time.Time{}
	}
}

// Renewal records one lease renewal attempt; pass it to the engine's
// ObserveRenewals.
func (m *Metrics) Renewal(ok bool, took time.Duration) {
	result := "ok"
	if !ok {
		result = "failed"
	}
	m.renewals.WithLabelValues(result).Inc()
	m.renewalSeconds.Observe(took.Seconds())
}

// Call records one service call and how it ended: code is the HTTP status
// (the kernel services use the same codes), 200 for success.
func (m *Metrics) Call(via, service, op string, code int, d time.Duration) {
	labels := callLabels{via: via, service: service, op: op, code: code}
	series, ok := m.callSeries.Load(labels)
	if !ok {
		series, _ = m.callSeries.LoadOrStore(labels, &callSeries{
			count:   m.calls.WithLabelValues(via, service, op, strconv.Itoa(code)),
			seconds: m.callSeconds.WithLabelValues(via, service, op),
		})
	}
	s := series.(*callSeries)
	s.count.Inc()
	s.seconds.Observe(d.Seconds())
}

type callLabels struct {
	via, service, op string
	code             int
}

type callSeries struct {
	count   prometheus.Counter
	seconds prometheus.Observer
}

// SessionOpened and SessionClosed count an object transfer in progress.
func (m *Metrics) SessionOpened(via string) { m.sessionsOpen.WithLabelValues(via).Inc() }

// SessionClosed: see SessionOpened.
func (m *Metrics) SessionClosed(via string) { m.sessionsOpen.WithLabelValues(via).Dec() }

// Transferred counts object bytes moved.
func (m *Metrics) Transferred(via, direction string, n int64) {
	if n > 0 {
		m.transferBytes.WithLabelValues(via, direction).Add(float64(n))
	}
}

// statusWriter remembers the status a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// metered records every call of a route.
func (a *api) metered(service, op string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		h(sw, r)
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		a.metrics.Call(ViaHTTP, service, op, code, time.Since(start))
	})
}
