// Package app wires the engine: configuration, the shared-backend check,
// the claim on the ownership lease, and what follows from its outcome. The
// order of the lifecycle is the design: nothing opens before the claim.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/fx"

	"github.com/abi-engine/engine/adapters/secondary/lease/jetstream"
	"github.com/abi-engine/engine/adapters/secondary/natsconn"
	"github.com/abi-engine/engine/adapters/secondary/natsserver"
	"github.com/abi-engine/engine/app/config"
	"github.com/abi-engine/engine/domain"
)

// Exit codes of the engine process.
const (
	// ExitLeaseLost: another engine took the lease, or a standby gave up.
	ExitLeaseLost = 1
)

// Engine is one engine process's part on its NATS account. Start and Stop
// are plain methods; Module hooks them into an fx lifecycle.
type Engine struct {
	cfg      *config.Config
	me       domain.Holder
	log      *slog.Logger
	embed    bool
	shutdown func(code int)

	mu        sync.Mutex
	broker    *server.Server
	url       string
	leaseConn *nats.Conn
	ownership *domain.Ownership
	outcome   domain.Outcome
	stopWait  context.CancelFunc
	waiting   chan struct{}
}

// EngineParams build an Engine.
type EngineParams struct {
	Config *config.Config
	Holder domain.Holder
	Logger *slog.Logger
	// Embed runs a nats-server in the process when none answers at the
	// configured URL. Only the no-configuration start sets it.
	Embed bool
	// Shutdown stops the process with an exit code; the lease calls it when
	// it is lost and when a standby gives up.
	Shutdown func(code int)
}

// NewEngine returns an engine that has not started.
func NewEngine(p EngineParams) *Engine {
	return &Engine{cfg: p.Config, me: p.Holder, log: p.Logger, embed: p.Embed, shutdown: p.Shutdown}
}

// Me is the holder this engine writes into the lease.
func (e *Engine) Me() domain.Holder { return e.me }

// Ownership is the lease state machine; nil for a client engine.
func (e *Engine) Ownership() *domain.Ownership {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ownership
}

// Outcome is what the claim decided.
func (e *Engine) Outcome() domain.Outcome {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.outcome
}

// URL is the NATS URL the engine uses.
func (e *Engine) URL() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.url
}

// Start reaches the broker and claims the lease. A serving engine then
// keeps it; a standby waits for it in the background; a client never
// touches it.
func (e *Engine) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			e.closeConnections()
		}
	}()
	url := e.cfg.NATS.URL
	if e.embed && !natsserver.Answers(url, 500*time.Millisecond) {
		hostport := strings.TrimPrefix(url, "nats://")
		s, err := natsserver.Start(hostport, e.cfg.DataDir)
		if err != nil {
			return err
		}
		e.broker = s
		e.log.Info("no NATS server answered; embedded one", "url", url, "data", e.cfg.DataDir)
	}
	e.url = url
	role := e.cfg.Role()
	if role == domain.RoleClient {
		e.outcome = domain.OutcomeClient
		e.report(nil)
		return nil
	}

	cred := e.cfg.NATS.Credentials
	nc, err := natsconn.Connect(natsconn.Options{
		URL: url, Name: "abi-engine lease " + e.me.InstanceID,
		CredsFile: cred.CredsFile, NkeySeedFile: cred.NkeySeedFile, User: cred.User, Password: cred.Password,
		Token: cred.Token, CA: cred.TLS.CA, Cert: cred.TLS.Cert, Key: cred.TLS.Key,
	})
	if err != nil {
		return err
	}
	e.leaseConn = nc
	lease, err := jetstream.Open(ctx, nc, jetstream.Options{Replicas: e.cfg.NATS.Engine.BucketReplicas})
	if err != nil {
		return err
	}
	o, err := domain.NewOwnership(lease, e.me, e.cfg.Timing(), domain.WithLogger(e.log))
	if err != nil {
		return err
	}
	outcome, err := o.Claim(ctx, role)
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.ownership, e.outcome = o, outcome
	e.mu.Unlock()
	e.report(o)

	switch outcome {
	case domain.OutcomeServe:
		go e.watchLost(o)
	case domain.OutcomeStandby:
		wctx, cancel := context.WithCancel(context.Background())
		e.stopWait, e.waiting = cancel, make(chan struct{})
		go e.awaitLease(wctx, o)
	case domain.OutcomeClient:
		// auto found a live engine: this one uses it and holds nothing.
	}
	return nil
}

func (e *Engine) awaitLease(ctx context.Context, o *domain.Ownership) {
	defer close(e.waiting)
	err := o.AwaitLease(ctx)
	switch {
	case err == nil:
		e.mu.Lock()
		e.outcome = domain.OutcomeServe
		e.mu.Unlock()
		e.log.Info("standby took over the lease; serving")
		go e.watchLost(o)
	case ctx.Err() != nil:
	default:
		e.log.Error("standby stops", "err", err)
		e.shutdown(ExitLeaseLost)
	}
}

func (e *Engine) watchLost(o *domain.Ownership) {
	<-o.Lost()
	e.log.Error("another engine took the lease; stopping")
	e.shutdown(ExitLeaseLost)
}

// report prints where the engine stands, once, at start.
func (e *Engine) report(o *domain.Ownership) {
	state := "client"
	if o != nil {
		state = o.State().String()
	}
	e.log.Info("engine started",
		"role", e.cfg.Role().String(),
		"state", state,
		"rollout", e.me.RolloutID,
		"nats", e.url,
		"data_dir", e.cfg.DataDir)
}

// Stop releases the lease so a standby takes over at once, then closes
// what Start opened, the embedded broker last.
func (e *Engine) Stop(ctx context.Context) error {
	var errs []error
	if e.stopWait != nil {
		e.stopWait()
		<-e.waiting
	}
	if o := e.Ownership(); o != nil {
		if err := o.Release(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	e.closeConnections()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stop engine: %w", err)
	}
	return nil
}

// closeConnections closes the lease's connection, then the embedded broker.
func (e *Engine) closeConnections() {
	if e.leaseConn != nil {
		e.leaseConn.Close()
	}
	if e.broker != nil {
		e.broker.Shutdown()
		e.broker.WaitForShutdown()
	}
}

// Module provides the Engine and hooks it into the fx lifecycle; supply
// EngineParams without Shutdown, which comes from fx.
var Module = fx.Module("engine",
	fx.Provide(func(p EngineParams, sd fx.Shutdowner) *Engine {
		p.Shutdown = func(code int) { _ = sd.Shutdown(fx.ExitCode(code)) }
		return NewEngine(p)
	}),
	fx.Invoke(func(lc fx.Lifecycle, e *Engine) {
		lc.Append(fx.StartStopHook(e.Start, e.Stop))
	}),
)
