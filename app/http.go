package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"

	httpapi "github.com/abi-engine/engine/adapters/primary/http"
	"github.com/abi-engine/engine/app/config"
)

// HTTP is the engine's HTTP API on http.listen: probes, status, metrics and
// the REST surface over the engine's facades, so a standby answers it
// during a handover.
type HTTP struct {
	cfg     config.HTTP
	engine  *Engine
	metrics *httpapi.Metrics
	log     *slog.Logger

	mu  sync.Mutex
	ln  net.Listener // bound by Bind, served by Start
	srv *httpapi.Server
}

// NewHTTP makes the API and counts the engine's lease transitions in its
// metrics from the first, so it must run before the engine starts.
func NewHTTP(cfg *config.Config, e *Engine, log *slog.Logger) *HTTP {
	m := httpapi.NewMetrics()
	e.Observe(m.Observe)
	e.ObserveRenewals(m.Renewal)
	e.ObserveCalls(func(service, op string, code int, took time.Duration) { m.Call("nats", service, op, code, took) })
	m.Registry().MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "abi_engine_nats_sessions_open",
		Help: "Object transfers and parked overflow replies this engine holds on NATS.",
	}, func() float64 { return float64(e.SessionsOpen()) }))
	h := &HTTP{cfg: cfg.HTTP, engine: e, metrics: m, log: log}
	// The requests in progress at a stop are the engine's clients' calls:
	// they finish beside its own, under its drain deadline, after its
	// release, and before it closes the connection its facades use.
	e.DrainWith(h.drain)
	return h
}

// Metrics are the engine's Prometheus metrics.
func (h *HTTP) Metrics() *httpapi.Metrics { return h.metrics }

// engineView is the engine as the API sees it.
type engineView struct{ e *Engine }

func (v engineView) Status() any { return v.e.Status() }
func (v engineView) Ready() bool { return v.e.Ready() }
func (v engineView) Alive() bool { return v.e.Alive() }

// Bind takes http.listen before the engine starts, so a taken port fails
// the start before the engine claims the lease: an engine that began
// serving and then found its port taken would hand the account over
// again at once. So does a trusted proxy that is not an address or a
// CIDR, or an http.proxy_header that names neither header. With
// http.listen off it does nothing.
func (h *HTTP) Bind(context.Context) error {
	if h.cfg.Off() {
		return nil
	}
	if _, err := h.cfg.Proxies(); err != nil {
		return fmt.Errorf("http.trusted_proxies: %w", err)
	}
	if _, err := h.cfg.UsesForwarded(); err != nil {
		return fmt.Errorf("http.proxy_header: %w", err)
	}
	ln, err := httpapi.Bind(h.cfg.Listen)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.ln = ln
	h.mu.Unlock()
	return nil
}

// Unbind lets go of a port Start has not served, when the start failed
// between the two, and ends a server the engine's stop has not drained.
// Its hook stops after the engine's.
func (h *HTTP) Unbind(ctx context.Context) error {
	h.mu.Lock()
	ln := h.ln
	h.ln = nil
	h.mu.Unlock()
	if ln != nil {
		return ln.Close()
	}
	return h.drain(ctx)
}

// Start serves the API, in a goroutine, on the port Bind took. The engine
// has claimed by now: its services are known. The API calls them as a
// caller of its own (APIServices), apart from the modules, so its
// clients never take the modules' shares. With http.listen off it does
// nothing.
func (h *HTTP) Start(context.Context) error {
	if h.cfg.Off() {
		h.log.Info("HTTP API off")
		return nil
	}
	h.mu.Lock()
	ln := h.ln
	h.ln = nil
	h.mu.Unlock()
	if ln == nil {
		return errors.New("http: Start before Bind")
	}
	// Bind has parsed them.
	proxies, _ := h.cfg.Proxies()
	header := httpapi.XForwardedFor
	if forwarded, _ := h.cfg.UsesForwarded(); forwarded {
		header = httpapi.Forwarded
	}
	s := h.engine.APIServices()
	srv := httpapi.Serve(ln, httpapi.Options{
		Engine: engineView{h.engine},
		Services: httpapi.Services{
			KeyValue: s.KeyValue, ObjectStorage: s.ObjectStorage, Document: s.Document, VectorStore: s.VectorStore,
		},
		Metrics:        h.metrics,
		Token:          h.cfg.Token,
		Listen:         h.cfg.Listen,
		Hosts:          h.cfg.Hosts,
		TrustedProxies: proxies,
		ProxyHeader:    header,
		MaxProxyConns:  h.cfg.MaxProxyConnections,
		ProxyConnShare: h.cfg.MaxConnectionsPerProxy,
		MaxClientConns: h.cfg.MaxClientConnections,
		Logger:         h.log,
	})
	h.mu.Lock()
	h.srv = srv
	h.mu.Unlock()
	h.log.Info("HTTP API listening", "addr", srv.Addr(), "token", h.cfg.Token != "", "trusted_proxies", len(proxies), "proxy_header", header)
	return nil
}

// drain stops accepting, lets the requests in progress finish until ctx
// ends, then closes those left. A second call returns at once.
func (h *HTTP) drain(ctx context.Context) error {
	h.mu.Lock()
	srv := h.srv
	h.mu.Unlock()
	if srv == nil {
		return nil
	}
	err := srv.Shutdown(ctx)
	if ctx.Err() != nil {
		// As with the kernel's calls, a drain cut short is told, not failed.
		h.log.Warn("drain deadline passed; HTTP requests still running were closed")
		return nil
	}
	if err != nil {
		return fmt.Errorf("HTTP API: %w", err)
	}
	return nil
}

// Addr is the address the API listens on, with the port the system chose
// for port 0; "" before Start.
func (h *HTTP) Addr() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.srv == nil {
		return ""
	}
	return h.srv.Addr()
}

// bindHTTP appends the hook that takes the API's port; it goes before the
// engine's hook, so a taken port fails the start before the engine claims.
func bindHTTP() fx.Option {
	return fx.Invoke(func(lc fx.Lifecycle, h *HTTP) { lc.Append(fx.StartStopHook(h.Bind, h.Unbind)) })
}

// httpAPI appends the API's start after the engine's, so it serves once
// the engine has claimed. It has no stop of its own: the engine's stop
// drains it (DrainWith), since a stop here, before the engine's, would
// spend the stop's whole budget on a slow request and leave the engine
// none to release and drain in.
func httpAPI() fx.Option {
	return fx.Options(
		fx.Provide(NewHTTP),
		fx.Invoke(func(lc fx.Lifecycle, h *HTTP) { lc.Append(fx.StartHook(h.Start)) }),
	)
}
