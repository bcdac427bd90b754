// Package httpapi is the engine's HTTP API: probes for the orchestrator,
// the engine's status, Prometheus metrics, and a REST surface over the
// kernel services. It drives the engine through interfaces of its own, so
// the services are whatever the app hands it: the client facades, which
// reach the serving engine, so a standby answers during a handover.
package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/abi-engine/engine/internal/quota"
	"github.com/abi-engine/engine/ports"
)

// Engine is what the API reports about the engine.
type Engine interface {
	// Status is where the engine stands, encoded as JSON for /status.
	Status() any
	// Ready reports whether the engine does its part: serving, standing
	// by, or a client. /readyz answers 503 when it does not.
	Ready() bool
	// Alive reports whether the engine is not stuck: false only when it
	// holds the lease and its keeper has stopped turning
	// (domain.Ownership.Stalled), which a restart cures. /healthz answers
	// 503 when it is not. A fenced, standing-by or stopping engine is alive.
	Alive() bool
}

// Services are the kernel services the REST surface calls; a nil one is
// switched off and its routes answer 501.
type Services struct {
	KeyValue      ports.KeyValue
	ObjectStorage ports.ObjectStorage
	Document      ports.DocumentStore
	VectorStore   ports.VectorStore
}

// DefaultMaxBody bounds each body the API reads whole: key-value values
// and JSON requests. Objects are streamed and have no bound. All such
// bodies in flight are bounded together too (DefaultBodyBudget).
const DefaultMaxBody = 8 << 20

// Options configure the API.
type Options struct {
	Engine   Engine
	Services Services
	// Metrics, when nil, are made afresh.
	Metrics *Metrics
	// Token, when set, is required as a bearer token on every route but
	// /healthz and /readyz.
	Token string
	// Listen is the address the API listens on, and Hosts the other names
	// it is known by: without a token, a request to any route but
	// /healthz and /readyz must name one of them, or an IP address, as
	// its Host (see hostCheck).
	Listen string
	Hosts  []string
	Logger *slog.Logger
	// MaxBody is DefaultMaxBody when <= 0.
	MaxBody int64
	// BodyBudget bounds the bytes of the bodies read whole that requests
	// in flight hold, in all, and BodyShare those of one client (see
	// clients); they are DefaultBodyBudget and a DefaultBodyShareDivisor
	// part of the budget when <= 0. A share is at least MaxBody, and the
	// budget at least a share, so that every body within MaxBody can be
	// admitted.
	BodyBudget int64
	BodyShare  int64
	// BodyStall is how long one read of such a body may wait on the
	// client; DefaultBodyStall when <= 0.
	BodyStall time.Duration
	// MaxTransfers, TransferStall and MinTransferRate bound object
	// transfers; each is its Default when <= 0. TransferShare is how many
	// of them one client (see clients) runs at once: a
	// DefaultTransferShareDivisor part of MaxTransfers, and at least one,
	// when <= 0.
	MaxTransfers    int
	TransferShare   int
	TransferStall   time.Duration
	MinTransferRate float64
	// MaxRequests bounds the requests in flight on the routes that call
	// the services, but object transfers, and RequestShare those of one
	// client (see clients); they are DefaultMaxRequests and a
	// DefaultRequestShareDivisor part of it, at least one, when <= 0.
	MaxRequests  int
	RequestShare int
	// TrustedProxies are the reverse proxies in front of the API: a
	// request whose connection comes from one counts against the client
	// that ProxyHeader names, and their connections are not bounded
	// per client (see clients) when Serve serves these Options.
	TrustedProxies []netip.Prefix
	// ProxyHeader is the header the trusted proxies write: XForwardedFor,
	// the zero value, or Forwarded. The other is not read.
	ProxyHeader ProxyHeader
	// MaxProxyConns bounds the connections the trusted proxies hold, all
	// together, when Serve serves these Options; MaxProxyConns when <= 0.
	// ProxyConnShare bounds those of one proxy address, at most
	// MaxProxyConns; when <= 0, MaxProxyConns if every trusted proxy is
	// one address, and a ProxyShareDivisor part of it, at least one, if a
	// range is wider (see limitsFor).
	MaxProxyConns  int
	ProxyConnShare int
	// MaxClientConns bounds the connections the clients that are not
	// trusted proxies hold, all together, when Serve serves these
	// Options; MaxClientConns when <= 0.
	MaxClientConns int
}

// api holds what the handlers share.
type api struct {
	engine   Engine
	services Services
	metrics  *Metrics
	log      *slog.Logger
	maxBody  int64
	bodies   *quota.Quota
	// bodyStall bounds each read of a body read whole.
	bodyStall time.Duration
	// joining is held while a body's chunks are joined (see join).
	joining sync.Mutex

	clients      clients
	requests     *quota.Quota // a slot per request in flight, by client
	maxRequests  int
	transfers    *quota.Quota // a slot per object transfer running, by client
	maxTransfers int
	stall        time.Duration
	minRate      float64
}

// NewHandler returns the API's routes.
func NewHandler(o Options) http.Handler {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
	if o.MaxBody <= 0 {
		o.MaxBody = DefaultMaxBody
	}
	if o.BodyBudget <= 0 {
		o.BodyBudget = DefaultBodyBudget
	}
	if o.BodyShare <= 0 {
		o.BodyShare = o.BodyBudget / DefaultBodyShareDivisor
	}
	o.BodyShare = max(o.BodyShare, o.MaxBody)
	o.BodyBudget = max(o.BodyBudget, o.BodyShare)
	if o.BodyStall <= 0 {
		o.BodyStall = DefaultBodyStall
	}
	if o.MaxTransfers <= 0 {
		o.MaxTransfers = DefaultMaxTransfers
	}
	if o.TransferShare <= 0 {
		o.TransferShare = max(o.MaxTransfers/DefaultTransferShareDivisor, 1)
	}
	o.TransferShare = min(o.TransferShare, o.MaxTransfers)
	if o.MaxRequests <= 0 {
		o.MaxRequests = DefaultMaxRequests
	}
	if o.RequestShare <= 0 {
		o.RequestShare = max(o.MaxRequests/DefaultRequestShareDivisor, 1)
	}
	o.RequestShare = min(o.RequestShare, o.MaxRequests)
	if o.TransferStall <= 0 {
		o.TransferStall = DefaultTransferStall
	}
	if o.MinTransferRate <= 0 {
		o.MinTransferRate = DefaultMinTransferRate
	}
	a := &api{
		engine: o.Engine, services: o.Services, metrics: o.Metrics, log: o.Logger, maxBody: o.MaxBody,
		bodies:       quota.New(o.BodyBudget, o.BodyShare),
		bodyStall:    o.BodyStall,
		clients:      clients{trusted: o.TrustedProxies, header: o.ProxyHeader},
		requests:     quota.New(int64(o.MaxRequests), int64(o.RequestShare)),
		maxRequests:  o.MaxRequests,
		transfers:    quota.New(int64(o.MaxTransfers), int64(o.TransferShare)),
		maxTransfers: o.MaxTransfers, stall: o.TransferStall, minRate: o.MinTransferRate,
	}
	open := http.NewServeMux()
	open.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		alive := a.engine.Alive()
		code := http.StatusOK
		if !alive {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, map[string]bool{"alive": alive})
	})
	open.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ready := a.engine.Ready()
		code := http.StatusOK
		if !ready {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, map[string]bool{"ready": ready})
	})

	guarded := http.NewServeMux()
	guarded.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, a.engine.Status())
	})
	guarded.Handle("GET /metrics", a.metrics.Handler())
	a.routes(guarded)

	rest := jsonErrors(guarded)
	if o.Token != "" {
		rest = bearer(o.Token, rest)
	} else {
		rest = hostCheck(o.Listen, o.Hosts, rest)
	}
	open.Handle("/", rest)
	return nosniff(canonical(open))
}

// canonical refuses a path that holds an empty, "." or ".." segment. The
// mux would answer it with a redirect to the path cleaned, which names
// another key, object or document, and a client that follows redirects
// would send its PUT or DELETE there: a PUT to /v1/kv/a//b set a/b. A key
// with such a segment is written with its slashes or dots percent-encoded.
func canonical(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.EscapedPath()
		if r.Method != http.MethodConnect && p != "" && p != cleanPath(p) {
			writeError(w, http.StatusBadRequest, fmt.Sprintf(
				"path %q holds an empty, \".\" or \"..\" segment, which would name another resource; "+
					"percent-encode such a key's slashes as %%2F and its dots as %%2E", p))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// cleanPath is p as the mux cleans it before it routes: path.Clean, with
// a trailing slash kept.
func cleanPath(p string) string {
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if strings.HasSuffix(p, "/") && np != "/" {
		np += "/"
	}
	return np
}

// routes registers the REST surface.
func (a *api) routes(mux *http.ServeMux) {
	for _, rt := range []struct {
		pattern, service, op string
		h                    http.HandlerFunc
	}{
		{"GET /v1/kv/{key...}", ports.ServiceKeyValue, "get", a.kvGet},
		{"PUT /v1/kv/{key...}", ports.ServiceKeyValue, "set", a.kvSet},
		{"DELETE /v1/kv/{key...}", ports.ServiceKeyValue, "delete", a.kvDelete},
		{"GET /v1/objects/{key...}", ports.ServiceObjectStorage, "get", a.transferSlots(a.objGet)},
		{"PUT /v1/objects/{key...}", ports.ServiceObjectStorage, "put", a.transferSlots(a.objPut)},
		{"DELETE /v1/objects/{key...}", ports.ServiceObjectStorage, "delete", a.objDelete},
		{"GET /v1/documents/{collection}/{id}", ports.ServiceDocument, "get", a.docGet},
		{"PUT /v1/documents/{collection}/{id}", ports.ServiceDocument, "put", a.docPut},
		{"DELETE /v1/documents/{collection}/{id}", ports.ServiceDocument, "delete", a.docDelete},
		{"POST /v1/documents/{collection}/find", ports.ServiceDocument, "find", a.docFind},
		{"POST /v1/vectors/{collection}/search", ports.ServiceVectorStore, "search", a.vecSearch},
	} {
		h := rt.h
		if rt.service != ports.ServiceObjectStorage || rt.op == "delete" {
			h = a.requestSlots(answeredWhole(h))
		}
		mux.Handle(rt.pattern, a.metered(rt.service, rt.op, a.needs(rt.service, h)))
	}
}

// answeredWhole runs h on a context that its client hanging up does not
// end: the call to the engine runs to its answer, within the facade's time
// for a call. The engine runs a call it has begun whatever becomes of its
// caller, and parks a large answer until it is fetched, under the API's
// share of parked answers, since every HTTP client reaches the engine as
// one caller. A call ended by the hang-up never fetched its answer, which
// held the share for the engine's idle time while the other clients' large
// answers were refused 413. Object GETs and PUTs stream to and from their
// client and end with it; a transfer opened for one that hung up is closed
// by the facade.
func answeredWhole(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h(w, r.WithContext(context.WithoutCancel(r.Context())))
	}
}

// jsonErrors answers in JSON what the mux would answer in plain text: no
// route (404) or a wrong method (405, with its Allow header).
func jsonErrors(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		rec := &headerRecorder{header: http.Header{}}
		h.ServeHTTP(rec, r)
		if allow := rec.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		if rec.code == http.StatusMethodNotAllowed {
			writeError(w, rec.code, fmt.Sprintf("%s %s: allowed methods are %s", r.Method, r.URL.Path, rec.header.Get("Allow")))
			return
		}
		writeError(w, http.StatusNotFound, fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path))
	})
}

// headerRecorder keeps the status and headers of the mux's own error
// answer and drops its plain-text body.
type headerRecorder struct {
	header http.Header
	code   int
}

func (h *headerRecorder) Header() http.Header         { return h.header }
func (h *headerRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (h *headerRecorder) WriteHeader(code int)        { h.code = code }

// needs answers 501 when the route's service is switched off.
func (a *api) needs(service string, h http.HandlerFunc) http.HandlerFunc {
	var on bool
	switch service {
	case ports.ServiceKeyValue:
		on = a.services.KeyValue != nil
	case ports.ServiceObjectStorage:
		on = a.services.ObjectStorage != nil
	case ports.ServiceDocument:
		on = a.services.Document != nil
	case ports.ServiceVectorStore:
		on = a.services.VectorStore != nil
	}
	if on {
		return h
	}
	return func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotImplemented, fmt.Sprintf("the %s service is switched off on this engine", service))
	}
}

// bearer refuses a request without the token. Both sides are hashed first
// so the comparison takes the same time whatever the lengths. The scheme
// is matched in any case, as HTTP has it.
func bearer(token string, next http.Handler) http.Handler {
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		ok = ok && strings.EqualFold(scheme, "Bearer")
		sum := sha256.Sum256([]byte(got))
		if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="abi-engine"`)
			writeError(w, http.StatusUnauthorized, "a valid bearer token is required")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// requestTimeout bounds reading a request and writing its answer, but for
// object transfers; an 8 MiB body (DefaultMaxBody) fits at 140 KiB/s.
const requestTimeout = time.Minute

// MaxHeaderBytes bounds a request's line and headers (MaxHeaderLines
// their lines); net/http reads 4 KiB more before it refuses them 431. A key of the most bytes,
// percent-encoded whole (3 KiB), a content type of the most, a token and
// a proxy's X-Forwarded-For take some 5 KiB. Every connection the API
// admits (MaxClientConns and MaxProxyConns) may hold its headers while
// they arrive: at 64 KiB they held some 70 KiB of heap each, 560 MiB for
// the 8192, and net/http's default, 1 MiB, a megabyte each.
const MaxHeaderBytes = 16 << 10

// Server serves the API on a listener of its own.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	log  *slog.Logger
	done chan struct{}
	mu   sync.Mutex
	err  error
}

// Bind takes addr for a server that Serve starts later, so that a taken
// port fails a start before anything else has begun.
func Bind(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http.listen %s: %w", addr, err)
	}
	return ln, nil
}

// Serve serves the API of o (NewHandler) on ln in a goroutine until
// Shutdown, which closes ln. A client holds at most MaxConnsPerClient
// connections at once, and the clients at most o.MaxClientConns all
// together; the trusted proxies (o.TrustedProxies), whose connections
// carry many clients' requests, are not bounded so, but hold at most
// o.MaxProxyConns all together, and one proxy address o.ProxyConnShare
// of them. Both bounds are lowered to fit the
// process's file limit (see limitsFor).
func Serve(ln net.Listener, o Options) *Server {
	logger := o.Logger
	if logger == nil {
		logger = slog.Default()
	}
	o.Logger = logger
	if o.MaxProxyConns <= 0 {
		o.MaxProxyConns = MaxProxyConns
	}
	if o.MaxClientConns <= 0 {
		o.MaxClientConns = MaxClientConns
	}
	files := fileLimit()
	limits, lowered := limitsFor(o.MaxClientConns, o.MaxProxyConns, o.ProxyConnShare, addressesOnly(o.TrustedProxies), files)
	if lowered {
		logger.Warn("the HTTP API's connections are lowered to fit the process's file limit",
			"file_limit", files, "max_client_connections", limits.clients, "max_proxy_connections", limits.proxies)
	}
	h := NewHandler(o)
	s := &Server{
		// A request and its answer are bounded whole; object transfers,
		// which last as long as their size needs, move these deadlines on
		// while their client keeps up a minimum rate (see pace).
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       requestTimeout,
			WriteTimeout:      requestTimeout,
			IdleTimeout:       2 * requestTimeout,
			MaxHeaderBytes:    MaxHeaderBytes,
			ConnState:         connState,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		},
		ln:   ln,
		log:  logger,
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(limitConns(ln, limits, clients{trusted: o.TrustedProxies, header: o.ProxyHeader})); !errors.Is(err, http.ErrServerClosed) {
			logger.Error("the HTTP API stopped serving", "err", err)
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
		}
	}()
	return s
}

// Addr is the address the server listens on, with the port the system
// chose for port 0.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Shutdown stops accepting, lets requests in progress finish until ctx
// ends, then closes those left.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, s.srv.Close())
	}
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(err, s.err)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
