// Package app wires the engine. The order of its lifecycle is the design:
// the configuration is checked, then the shared-backend check runs and
// the modules' needs are checked against the configuration, then
// the engine claims the lease, and only then does anything open: backends,
// the kernel services, jobs and modules, as the claim decided.
package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/lease/jetstream"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/adapters/secondary/natsconn"
	"github.com/abi-engine/engine/adapters/secondary/storage"
	"github.com/abi-engine/engine/adapters/secondary/suspendclock"
	"github.com/abi-engine/engine/app/config"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/callerauth"
	"github.com/abi-engine/engine/internal/redact"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// Exit codes of the engine process.
const (
	// ExitLeaseLost: another engine took the lease, or a standby gave up.
	ExitLeaseLost = 1
	// ExitConnectionLost: the NATS connection closed for good.
	ExitConnectionLost = 1
)

// connectionLostGrace is how long a graceful stop may take after the NATS
// connection closed for good before the process exits regardless: an
// engine must never stay up without its broker.
const connectionLostGrace = 20 * time.Second

// EngineParams build an Engine.
type EngineParams struct {
	Config *config.Config
	Holder domain.Holder
	Logger *slog.Logger
	// Storage is every service's adapter, resolved and checked, unopened.
	Storage []storage.Built
	// Modules run next to the kernel services.
	Modules []Module
	// Embed runs a nats-server in the process when none answers at the
	// configured URL. Only the no-configuration start sets it.
	Embed bool
	// Shutdown stops the process gracefully with an exit code.
	Shutdown func(code int)
	// Exit ends the process at once; os.Exit when nil.
	Exit func(code int)
}

// Engine is one engine process's part on its NATS account. Start and Stop
// are plain methods; the fx lifecycle calls them.
type Engine struct {
	p        EngineParams
	log      *slog.Logger
	jobs     *Jobs
	links    *links      // the broker and the engine's connections to it
	modules  *moduleHost // starts the modules and stops those started
	ready    atomic.Bool // Start has done its part
	stopping atomic.Bool
	// exitArmed ends the process if a stop the broker's loss began hangs.
	exitArmed atomic.Pointer[time.Timer]
	// stopAsked: the engine has asked its process to stop; it asks once,
	// for the first reason, whichever of them comes next (a lost broker
	// also loses the lease a moment later).
	stopAsked atomic.Bool

	mu        sync.Mutex
	ownership *domain.Ownership
	outcome   domain.Outcome
	local     *local
	kernel    *kernel
	services  Services
	api       Services // the HTTP API's facades (APIServices)
	serving   *serving // decides what the engine does about the lease
	hooks     hooks    // what the rest of the app registered before Start
	stopWait  context.CancelFunc
	waiting   chan struct{}
	interrupt context.CancelFunc // ends the start under way; nil outside Start
	// interrupted is set by an Interrupt that found no start under way: one
	// that comes before Start has begun ends that start when it begins.
	interrupted bool
	// unreserve gives back the storage reserved for the engine
	// (reserveStorage); nil when it holds no reservation.
	unreserve func()
	// graphModules are the modules of an engine made by its fx graph
	// (newEngine), taken at Start; nil for one made with its modules.
	graphModules func() []Module
}

// NewEngine returns an engine that has not started.
func NewEngine(p EngineParams) *Engine {
	if p.Exit == nil {
		p.Exit = os.Exit
	}
	e := &Engine{p: p, log: p.Logger}
	e.links = newLinks(p.Config, p.Holder.InstanceID, p.Logger, e.connectionClosed)
	e.modules = newModuleHost(p.Modules, p.Config, p.Logger)
	e.jobs = NewJobs(p.Logger, func() (uint64, bool) {
		if o := e.Ownership(); o != nil {
			return o.Term()
		}
		return 0, false
	})
	// The stop waits for the jobs' runs before it releases the lease: a
	// run that does not heed its cancellation delays the handover by a
	// lease at most, what a crash costs, rather than hold the lease, and
	// the stop, for good.
	e.jobs.stopLimit = jobsStopLimit(p.Config.Timing())
	return e
}

// jobsStopLimit bounds a stop's wait for the jobs' runs: a lease.
func jobsStopLimit(t domain.Timing) time.Duration { return t.Lease }

// Me is the holder this engine writes into the lease.
func (e *Engine) Me() domain.Holder { return e.p.Holder }

// Ownership is the lease's state machine; nil for a client engine.
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

// Services are the kernel services as modules see them.
func (e *Engine) Services() Services {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.services
}

// APIServices are the kernel services as the HTTP API calls them: the
// same facades as the modules', but as a caller of their own, with their
// own connection and, when callers sign, their own name, so the API's
// clients take only the API's share of the engine's transfers, parked
// answers and waiting places, never the modules'. Empty with http.listen
// off.
func (e *Engine) APIServices() Services {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.api
}

// Jobs is the engine's job host.
func (e *Engine) Jobs() *Jobs { return e.jobs }

// URL is the NATS URL the engine uses.
func (e *Engine) URL() string { return e.links.URL() }

// SessionsOpen is how many object transfers and parked overflow replies
// this engine holds on NATS now.
func (e *Engine) SessionsOpen() int {
	e.mu.Lock()
	k := e.kernel
	e.mu.Unlock()
	if k == nil {
		return 0
	}
	return k.transfers.Open() + k.overflow.Open()
}

// Ready reports whether the engine does its part: serving, standing by, or
// a client. It is not ready while it claims, when fenced, or when stopping.
func (e *Engine) Ready() bool {
	if !e.ready.Load() || e.stopping.Load() {
		return false
	}
	o := e.Ownership()
	if o == nil || e.Outcome() == domain.OutcomeClient {
		return true
	}
	switch o.State() {
	case domain.StateServing, domain.StateStandby:
		return true
	}
	return false
}

// Alive reports whether the engine is not stuck: false only while it holds
// the lease and its keeper has heard the store answer none of its calls
// for domain.StalledAfter leases (domain.Ownership.Stalled). A client, a
// standby, a holder fenced for want of the store or waiting out a key made
// anew, and an engine that released the lease are alive.
func (e *Engine) Alive() bool {
	o := e.Ownership()
	return o == nil || !o.Stalled()
}

// connectionClosed stops the process when a connection closes for good
// while the engine runs, and ends it outright if stopping takes too long.
// It hears of the engine's own connections (links) and of its stores'
// (storageConns); the closes the engine makes at its stop come after
// stopping is set, and a store's own closes are not reported at all.
//
// All of the engine's connections close when the broker goes away; the
// first to report it stops the engine, once. A stop that ends in time
// disarms the exit, so an engine embedded in a longer-lived process (a
// test, as a rule) does not end it later.
func (e *Engine) connectionClosed(nc *nats.Conn) {
	if e.stopping.Load() {
		return
	}
	exit := time.AfterFunc(connectionLostGrace, func() {
		e.log.Error("stop took too long without NATS; exiting")
		e.p.Exit(ExitConnectionLost)
	})
	if !e.exitArmed.CompareAndSwap(nil, exit) {
		exit.Stop()
		return
	}
	e.log.Error("the NATS connection closed for good; stopping", "connection", nc.Opts.Name, "err", nc.LastError())
	e.askStop(ExitConnectionLost)
}

// askStop asks the process to stop with code, unless the engine has asked
// already.
func (e *Engine) askStop(code int) {
	if e.stopAsked.CompareAndSwap(false, true) {
		e.p.Shutdown(code)
	}
}

// Start reserves its storage, reaches the broker, claims the lease and
// starts what the claim decided. Nothing opens before the claim, and
// storage another engine has is refused before the broker is reached.
func (e *Engine) Start(ctx context.Context) (err error) {
	if err := e.checkModules(); err != nil {
		return err
	}
	base, interrupt := context.WithCancel(ctx)
	begun := time.Now()
	ctx, endLimit := context.WithDeadline(base, begun.Add(startLimit(e.p.Config.Timing().Lease)))
	defer endLimit()
	e.mu.Lock()
	e.interrupt = interrupt
	if e.interrupted {
		interrupt()
	}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.interrupt = nil
		e.mu.Unlock()
		interrupt()
	}()
	defer func() {
		if err != nil {
			e.stopping.Store(true)
			// fx runs no stop for a start that failed: the jobs stop
			// first, as at a stop, so that none runs on while, or after,
			// the module that registered it stops; then the kernel stops
			// and the lease is released, and only then are the modules
			// that did start stopped here, within a drain period, as a
			// stop stops them after its release: the activity log, a
			// module, keeps the release only if it hears of it first.
			e.stopJobs()
			e.release()
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.p.Config.Timing().Drain)
			if serr := e.modules.stop(sctx); serr != nil {
				e.log.Warn("stopping the modules of a start that failed", "err", serr)
			}
			cancel()
			e.closeAll()
		}
	}()
	cfg := e.p.Config
	role := cfg.Role()
	if role != domain.RoleClient {
		unreserve, err := reserveStorage(ctx, e, e.p.Storage)
		if err != nil {
			return err
		}
		e.mu.Lock()
		e.unreserve = unreserve
		e.mu.Unlock()
	}
	if err := e.links.dial(e.p.Embed); err != nil {
		return err
	}

	if role == domain.RoleClient {
		return e.startClient(ctx)
	}
	if err := e.links.dialLease(); err != nil {
		return err
	}
	// A serving engine refuses a lease bucket on fewer replicas than
	// configured; an engine of role auto (a command) uses the bucket the
	// account has, with a warning.
	lease, err := jetstream.Open(ctx, e.links.leaseConn, jetstream.Options{
		Replicas: cfg.NATS.Engine.BucketReplicas, RequireReplicas: role == domain.RoleServe, Logger: e.log,
	})
	if err != nil {
		return err
	}
	// The claim watches a holder for the longer of this engine's lease and
	// the one the holder's record says it renews by, and holds a key with
	// no value the longest lease the bucket keeps, if longer (ADR 0019):
	// the start is given the longest, or it would end before a takeover
	// from a holder that died on it, or before the wait over a deleted key
	// was out, every time the engine started again.
	longest := cfg.Timing().Lease
	if rec, rerr := lease.Read(ctx); rerr == nil && !rec.Free() {
		longest = max(longest, rec.Holder.Lease)
	}
	if kept, lerr := lease.Longest(ctx); lerr == nil {
		longest = max(longest, kept)
	}
	if longest > cfg.Timing().Lease {
		longer, endLonger := context.WithDeadline(base, begun.Add(startLimit(min(longest, domain.MaxLease))))
		defer endLonger()
		ctx = longer
	}
	// One clock for the lease and the hold of the stores' raise after a
	// release (ADR 0023): both measure time that passes for the other
	// engines too, suspends of this host included.
	clock := suspendclock.New()
	sv := newServing(e.log, e.jobs, clock, func() {
		e.log.Error("another engine took the lease; stopping")
		e.askStop(ExitLeaseLost)
	}, func(err error) {
		e.log.Error("cannot serve the kernel services", "err", err)
		e.askStop(ExitLeaseLost)
	}, e.announce)
	e.mu.Lock()
	e.serving = sv
	e.mu.Unlock()
	opts := []domain.Option{
		domain.WithLogger(e.log), domain.WithObserver(sv.transition), domain.WithClock(clock),
	}
	if cfg.NATS.Engine.HotStandby {
		opts = append(opts, domain.WithHotStandby())
	}
	e.mu.Lock()
	onRenewal := e.hooks.onRenewal()
	e.mu.Unlock()
	if onRenewal != nil {
		opts = append(opts, domain.WithRenewalObserver(onRenewal))
	}
	o, err := domain.NewOwnership(lease, e.p.Holder, cfg.Timing(), opts...)
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.ownership = o
	e.mu.Unlock()

	e.log.Info("claiming the lease", "role", role.String(), "rollout", e.p.Holder.RolloutID)
	outcome, err := o.Claim(ctx, role)
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.outcome = outcome
	e.mu.Unlock()
	switch outcome {
	case domain.OutcomeClient:
		return e.startClient(ctx)
	case domain.OutcomeServe:
		if err := e.openAndServe(ctx); err != nil {
			return err
		}
	case domain.OutcomeStandby:
		if err := e.openAndServe(ctx); err != nil {
			return err
		}
		wctx, cancel := context.WithCancel(context.Background())
		e.stopWait, e.waiting = cancel, make(chan struct{})
		go e.awaitLease(wctx, o)
	}
	e.report()
	return nil
}

// checkModules takes the modules of an engine its graph made, and refuses
// a nil one, or one that needs a service the configuration does not give
// the modules, before anything opens. The graph asks it as it is built,
// before any hook runs, and Start asks again, before it dials: a module
// that could never start must not have the engine run a broker, claim the
// lease, hold a new lease key for a lease, or take over from the engine
// that serves, only to fail and release.
func (e *Engine) checkModules() error {
	if e.graphModules != nil {
		e.p.Modules = e.graphModules()
		e.modules.modules = e.p.Modules
	}
	if err := nilModule(e.p.Modules); err != nil {
		return err
	}
	return e.modules.checkNeeds()
}

// startLimit bounds an engine's start: a claim may watch the holder for a
// whole lease (this engine's, or the longer one the holder renews by),
// then the backends open and the modules start. The engine keeps to it
// itself, so that a start that runs out of time still stops what it
// started and releases the lease before it returns; fx's own start
// timeout (New) leaves room for that, for the longest lease.
func startLimit(lease time.Duration) time.Duration { return lease + 30*time.Second }

// failedStartCleanUp bounds what a start that failed does before it
// returns, as the sum of the longest each of its steps takes, one after
// another: the wait for the jobs' runs (jobsStopLimit), the kernel's stop
// (kernelStopLimit), the release (the renewal in flight ends, then the
// released record is written, each cut off after a renewal period), the
// fence the release can bring about (natsapi.StopLimit, for a session
// whose call a store still holds), the modules' stop (a drain period), and
// closeSlack for the backends, the connections and the broker to close.
// fx's start timeout (New) adds it to the longest start, and a process that
// exited on that timeout left the lease held.
func failedStartCleanUp(t domain.Timing) time.Duration {
	return jobsStopLimit(t) + t.Drain + kernelStopLimit + 2*t.Renew() + natsapi.StopLimit + closeSlack
}

// closeSlack is what failedStartCleanUp leaves for the closes that have no
// bound of their own.
const closeSlack = 10 * time.Second

// stopDeadline bounds a stop once its jobs are done with: the release,
// cut off after a renewal period twice over, the drain period, and what is
// left for the modules' stop.
func stopDeadline(t domain.Timing) time.Duration { return t.Drain + t.Lease + closeSlack }

// stopTimeout is the time fx gives a stop: the wait for the jobs' runs,
// the stop's own deadline, the kernel's stop, the fence the release can
// bring about, and the closes. A process that exited on fx's timeout left
// the lease held, or released it late.
func stopTimeout(t domain.Timing) time.Duration {
	return jobsStopLimit(t) + stopDeadline(t) + kernelStopLimit + natsapi.StopLimit + closeSlack
}

// Interrupt ends a start still under way, as a signal to the process
// does: the claim, or the opening of what it decided, fails with the
// start's context, and Start stops what had started and releases a lease
// it took before it returns. Cancelling the context given to Start is not
// the same: fx returns from its start at once then, while this clean-up
// still runs, and a process that exits on that return leaves the lease
// held. An Interrupt before Start has begun ends that start when it
// begins: a signal handler is in place before fx runs the hooks before the
// engine's. After Start has returned, Interrupt does nothing; Stop stops.
func (e *Engine) Interrupt() {
	e.mu.Lock()
	interrupt := e.interrupt
	e.interrupted = true
	e.mu.Unlock()
	if interrupt != nil {
		interrupt()
	}
}

// stopJobs stops the jobs for good and waits for their runs, through the
// serving loop once it runs, so that it goes on acting on the lease
// meanwhile.
func (e *Engine) stopJobs() {
	e.mu.Lock()
	sv := e.serving
	e.mu.Unlock()
	if sv != nil {
		sv.shutdownJobs()
		return
	}
	e.jobs.Stop()
}

// startClient gives the modules facades and opens nothing: the storage an
// engine of role auto reserved is given back for another engine to take.
func (e *Engine) startClient(ctx context.Context) error {
	e.mu.Lock()
	e.outcome = domain.OutcomeClient
	e.mu.Unlock()
	e.giveBackStorage()
	if err := e.startModules(ctx); err != nil {
		return err
	}
	e.report()
	return nil
}

// openAndServe opens the backends and builds the kernel services, and hands
// the kernel to the serving loop, which subscribes it and starts the jobs
// when, and only while, the lease says the engine serves. Modules start
// either way: they use facades.
func (e *Engine) openAndServe(ctx context.Context) error {
	// A store that keeps the account it belongs to (a SQLite file or the
	// objects directory under data_dir, which an engine of another account
	// on this host must not open, or a PostgreSQL table, which one of
	// another account configured with it must not) asks it as it opens;
	// the broker is asked once, by the first of them.
	account := sync.OnceValues(func() (string, error) { return natsconn.Account(ctx, e.links.session) })
	// The stores log on the engine's log, and a connection of theirs
	// closing for good stops the engine (BuildStorage).
	octx := context.WithValue(ctx, openerKey{}, e)
	l, err := openLocal(ports.WithAccount(octx, func(context.Context) (string, error) { return account() }), e.p.Storage)
	if err != nil {
		return err
	}
	o := e.Ownership()
	var secret []byte
	if s := e.p.Config.NATS.CallerSecret; s != "" {
		secret = []byte(s)
	}
	e.mu.Lock()
	onCall := e.hooks.onCall()
	e.mu.Unlock()
	k, err := newKernel(natsapi.Options{
		Owner:        e.p.Holder.InstanceID,
		Connect:      func() (*nats.Conn, error) { return e.links.connect("abi-engine accept") },
		Replies:      e.links.session,
		Admit:        func() (uint64, bool) { return e.serving.admit(o) },
		CallerSecret: secret,
		Logger:       e.log,
		Version:      microVersion(e.p.Holder.Version),
		OnCall:       onCall,
	}, func(transfers *natsapi.TransferHost) []natsapi.Service {
		return append(l.kernelServices(secret != nil, transfers), natsapi.Engine(e.p.Holder, o.State))
	})
	if err != nil {
		return errors.Join(err, l.close())
	}
	for _, j := range l.sweepJobs() {
		if err := e.jobs.Register(j); err != nil {
			return errors.Join(err, l.close())
		}
	}
	e.mu.Lock()
	e.local, e.kernel = l, k
	e.mu.Unlock()
	e.serving.booted(k, handoverHold(l, e.p.Config.Timing()))
	return e.startModules(ctx)
}

// client is a facades' client on nc that signs, when callers sign, as
// caller.
func (e *Engine) client(nc *nats.Conn, caller string) *natsclient.Client {
	var opts []natsclient.Option
	if s := e.p.Config.NATS.CallerSecret; s != "" {
		opts = append(opts, natsclient.WithSigner(callerauth.NewSigner([]byte(s), caller)))
	}
	return natsclient.New(nc, opts...)
}

// startModules makes the facades of the modules and of the HTTP API, and
// starts the modules with theirs.
func (e *Engine) startModules(ctx context.Context) error {
	svc := facades(e.client(e.links.modConn, "engine "+e.p.Holder.InstanceID), e.p.Config)
	e.mu.Lock()
	l := e.local
	e.mu.Unlock()
	// Secrets are this deployment's configuration: read through the
	// serving engine, a standby's modules would get the old release's
	// values, a rotated secret's old one, and keep it past the handover.
	if l != nil && svc.Secrets != nil {
		if own := l.secrets(); own != nil {
			svc.Secrets = own
		}
	}
	var api Services
	if e.links.apiConn != nil {
		api = facades(e.client(e.links.apiConn, "engine "+e.p.Holder.InstanceID+" http"), e.p.Config)
	}
	e.mu.Lock()
	e.services, e.api = svc, api
	e.mu.Unlock()
	return e.modules.start(ctx, ModuleEnv{Services: svc, Jobs: e.jobs, Logger: e.log})
}

// announce tells the broker and the engine's observers of a transition,
// after the serving loop has acted on it.
func (e *Engine) announce(tr domain.Transition) {
	e.mu.Lock()
	observers := e.hooks.observers
	e.mu.Unlock()
	e.publish(tr)
	for _, f := range observers {
		f(tr)
	}
}

// publish announces a transition on wire.EventsSubject; it is best effort.
func (e *Engine) publish(tr domain.Transition) {
	b, err := json.Marshal(wire.EngineEvent{
		InstanceID: e.p.Holder.InstanceID, RolloutID: e.p.Holder.RolloutID,
		From: tr.From.String(), To: tr.To.String(), Revision: tr.Record.Revision,
		Previous: tr.Previous.InstanceID, Reason: tr.Reason, At: time.Now().UnixNano(),
	})
	if err == nil {
		_ = e.links.session.Publish(wire.EventsSubject, b)
	}
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
	case ctx.Err() != nil:
	default:
		e.log.Error("standby stops", "err", err)
		e.askStop(ExitLeaseLost)
	}
}

// report marks the engine started and prints, once, where it stands.
func (e *Engine) report() {
	e.ready.Store(true)
	state := "client"
	if o := e.Ownership(); o != nil && e.Outcome() != domain.OutcomeClient {
		state = o.State().String()
	}
	attrs := []any{
		"role", e.p.Config.Role().String(),
		"state", state,
		"rollout", e.p.Holder.RolloutID,
		"nats", redact.URLs(e.links.URL()),
		"http", e.p.Config.HTTP.Listen,
	}
	if e.Outcome() != domain.OutcomeClient {
		for _, b := range e.p.Storage {
			d := b.Declaration
			where := "shared"
			switch {
			case d.Off:
				where = "off"
			case d.Storage != nil && d.Storage.LocalStorage() != "":
				where = d.Storage.LocalStorage()
			}
			attrs = append(attrs, d.Service, d.Adapter+": "+where)
		}
	}
	e.log.Info("engine started", attrs...)
}

// Stop hands over: jobs stop, the lease is released (a standby takes it at
// once), the engine stops accepting calls, answers those it received within
// the drain period, then closes everything, the embedded broker last.
func (e *Engine) Stop(ctx context.Context) error {
	// The release and the drain must run even when the stop comes from a
	// start cut short by a signal, whose context is already cancelled; they
	// are bounded by the drain and a lease instead.
	timing := e.p.Config.Timing()
	e.stopping.Store(true)
	if e.stopWait != nil {
		e.stopWait()
		<-e.waiting
	}
	// Jobs stop before the release. The kernel answers on by the clock
	// until the release is written, and then, handed over, what reaches it
	// until it has stopped accepting: the standby subscribes meanwhile, an
	// overlap rather than a gap, which shared backends and their fencing
	// tokens make safe. A release that was not written fences it at once.
	e.stopJobs()
	// The stop's own time begins once the jobs are done with, which may
	// take a lease: begun before, a stuck run could leave the release
	// too little of it, and the successor would wait out the lease.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopDeadline(timing))
	defer cancel()
	var errs []error
	if o := e.Ownership(); o != nil {
		// What the stores keep for a term is not served past the
		// release: the successor may write as soon as it is written. This
		// engine serves no term again, so it ends them all, also one a
		// renewal might begin while it stops.
		e.mu.Lock()
		l := e.local
		e.mu.Unlock()
		l.endTerm(math.MaxUint64)
		if err := o.Release(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	dctx, cancelDrain := context.WithTimeout(ctx, timing.Drain)
	if err := e.drain(dctx); err != nil {
		errs = append(errs, err)
	}
	cancelDrain()
	if err := e.modules.stop(ctx); err != nil {
		errs = append(errs, err)
	}
	e.closeAll()
	if exit := e.exitArmed.Load(); exit != nil {
		exit.Stop()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stop engine: %w", err)
	}
	e.log.Info("engine stopped")
	return nil
}

// release stops the jobs and the kernel, then releases the lease, each
// of which does nothing when done already: a start that failed has no
// drain, so nothing answers past its release.
func (e *Engine) release() {
	e.mu.Lock()
	k, sv := e.kernel, e.serving
	e.mu.Unlock()
	if sv != nil {
		sv.shutdownJobs() // nothing subscribes the kernel from now on
	}
	if k != nil {
		k.stop()
	}
	if o := e.Ownership(); o != nil {
		_ = o.Release(context.Background()) // nothing when already released
	}
}

// closeAll closes backends and connections, the embedded broker last,
// once the lease is released.
func (e *Engine) closeAll() {
	e.release()
	e.mu.Lock()
	l, sv := e.local, e.serving
	e.mu.Unlock()
	if sv != nil {
		sv.close()
	}
	if err := l.close(); err != nil {
		e.log.Warn("closing backends", "err", err)
	}
	e.giveBackStorage()
	e.links.close()
}

// giveBackStorage gives back the storage reserved for the engine, if it
// holds it.
func (e *Engine) giveBackStorage() {
	e.mu.Lock()
	unreserve := e.unreserve
	e.unreserve = nil
	e.mu.Unlock()
	if unreserve != nil {
		unreserve()
	}
}

var semver = regexp.MustCompile(`^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`)

// microVersion is the version NATS micro reports, which must be SemVer: a
// build without one ("dev") reports 0.0.0-dev.
func microVersion(v string) string {
	if semver.MatchString(v) {
		return v
	}
	clean := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '.' || r == '-' {
			return r
		}
		return '-'
	}, strings.TrimPrefix(v, "v"))
	if semver.MatchString(clean) {
		return clean
	}
	if clean == "" {
		clean = "unknown"
	}
	return "0.0.0-" + clean
}
