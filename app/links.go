package app

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/secondary/natsconn"
	"github.com/abi-engine/engine/adapters/secondary/natsserver"
	"github.com/abi-engine/engine/app/config"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/redact"
)

// links are the engine's ties to its broker: the nats-server it runs in
// its process when none answered, and the connections it dials at its
// start and closes at its end, the session, the modules', the HTTP API's
// and the lease's. The kernel's accepting connection is dialed here too
// (connect), but its host owns and closes it. What a connection closed for
// good means for the engine is the engine's to decide: closed hears of it.
type links struct {
	cfg      *config.Config
	instance string // the engine's instance id, in each connection's name
	log      *slog.Logger
	closed   func(*nats.Conn)

	mu  sync.Mutex
	url string // "" until dialed

	broker    *server.Server
	session   *nats.Conn // replies and owner subjects
	leaseConn *nats.Conn // the lease's own, so a busy endpoint never delays a renewal
	// modConn is the modules' facades', with no reconnect buffer: a
	// module's call sent while it reconnects fails then, and never lands
	// after its module saw it fail.
	modConn *nats.Conn
	// apiConn is the HTTP API's, for its facades: its inbox prefix makes
	// the API a caller apart from the modules when callers do not sign.
	// nil with http.listen off.
	apiConn *nats.Conn
}

func newLinks(cfg *config.Config, instance string, log *slog.Logger, closed func(*nats.Conn)) *links {
	return &links{cfg: cfg, instance: instance, log: log, closed: closed}
}

// URL is the NATS URL the engine uses; "" before its start.
func (l *links) URL() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.url
}

// dial reaches the broker at the configured URL, and runs one in the
// process when embed is set and none answers there, then opens the
// session and the connections of the modules and of the HTTP API. What it
// opened before an error stays open, for close.
func (l *links) dial(embed bool) error {
	url := l.cfg.NATS.URL
	l.mu.Lock()
	l.url = url
	l.mu.Unlock()
	if embed && !natsserver.Answers(url, 500*time.Millisecond) {
		// A client runs no broker: the engines of the account would
		// connect to one that lives only as long as a process that never
		// serves, and lose it when that process exits.
		if l.cfg.Role() == domain.RoleClient {
			return fmt.Errorf("no NATS server answers at %s, and an engine of role client runs none in its process; start a serving engine first, or set nats.url",
				redact.URLs(url))
		}
		s, err := natsserver.Start(strings.TrimPrefix(url, "nats://"), l.cfg.DataDir)
		if err != nil {
			return err
		}
		l.broker = s
		l.log.Info("no NATS server answered; embedded one", "url", redact.URLs(url), "data", l.cfg.DataDir)
	}
	var err error
	if l.session, err = l.connect("abi-engine"); err != nil {
		return err
	}
	// A call of a module, or of the HTTP API, sent while its connection
	// reconnects fails at once: nats.go's reconnect buffer would send it
	// when the connection came back, after its caller had seen it fail,
	// and over what was written since. The session keeps the buffer for
	// the kernel's answers, which a caller still waiting takes late.
	noBuffer := func(o *natsconn.Options) { o.NoReconnectBuffer = true }
	if l.modConn, err = l.connect("abi-engine modules", noBuffer); err != nil {
		return err
	}
	if !l.cfg.HTTP.Off() {
		if l.apiConn, err = l.connect("abi-engine http", noBuffer); err != nil {
			return err
		}
	}
	return nil
}

// dialLease opens the lease's connection; a client engine has none.
func (l *links) dialLease() error {
	var err error
	l.leaseConn, err = l.connect("abi-engine lease")
	return err
}

// connect opens a NATS connection. Each of the engine's connections reports
// to closed when it closes for good: the session, the modules', the HTTP
// API's and the lease's, and the accepting connection too, which the
// kernel's host closes itself at every fence and handover, replacing this
// handler first (natsapi.Host), so only a close it did not make reaches
// the engine. An engine whose accepting connection is gone for good would
// otherwise hold the lease, renew it and be ready, with nothing
// subscribed: every call would find no responders, and no standby would
// take over. The stores that keep their data on NATS dial connections of
// their own, which report to the same handler (storageConns): one gone
// for good would otherwise fail every call of its service while the
// engine went on holding the lease.
func (l *links) connect(name string, opts ...func(*natsconn.Options)) (*nats.Conn, error) {
	o := natsOptions(l.cfg, l.URL(), name+" "+l.instance)
	for _, opt := range opts {
		opt(&o)
	}
	o.Logger = l.log
	o.ClosedHandler = l.closed
	if l.broker != nil {
		// The broker is this process's own: its calls and answers need
		// not go through the kernel's sockets.
		o.InProcess = l.broker
	}
	return natsconn.Connect(o)
}

// close closes the connections, the HTTP API's and the modules' first,
// the lease's last, then shuts the embedded broker down and waits for it.
func (l *links) close() {
	for _, nc := range []*nats.Conn{l.apiConn, l.modConn, l.session, l.leaseConn} {
		if nc != nil {
			nc.Close()
		}
	}
	if l.broker != nil {
		l.broker.Shutdown()
		l.broker.WaitForShutdown()
	}
}
