package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/adapters/secondary/natsconn"
	"github.com/abi-engine/engine/adapters/secondary/storage"
	"github.com/abi-engine/engine/app/config"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storagepolicy"
)

// storageBlocks turns the configuration's service blocks into the storage
// registry's, a field-by-field copy: config names no adapter (it asks the
// registry), and adapters know no app.
func storageBlocks(cfg *config.Config) []storage.Block {
	var out []storage.Block
	for _, b := range cfg.Blocks() {
		conf := b.Service.Config
		out = append(out, storage.Block{
			Service: b.Name, Key: b.Key, Adapter: b.Service.Adapter, Config: &conf,
		})
	}
	return out
}

// BuildStorage resolves every service's adapter without opening anything.
// Adapters that keep their data on NATS dial connections of their own, with
// the engine's credentials, when they open. The engine that opens the
// stores (its Start, whether its fx graph or NewEngine made it) has them
// log on its log, and stops when one of their connections closes for good
// on its own. Opened without an engine (storage.Open), they log on
// slog.Default() and nothing hears of their connections closing. What one
// call builds is for one engine at a time: an engine that may open it (of
// role serve or auto) reserves it as its start begins, and one that does
// so while another engine has it fails its start, naming the other, before
// it reaches the broker or the lease (reserveStorage), since the stores of
// both would log on one engine's log, and a connection of one engine's
// stores could stop the other when it closed. Once the first has stopped,
// or become a client, another may take it.
func BuildStorage(cfg *config.Config) ([]storage.Built, error) {
	conns := &storageConns{}
	built, err := storage.BuildEnv(storageBlocks(cfg), storage.Env{
		DataDir: cfg.DataDir,
		Logger:  slog.New(storesHandler{conns: conns}),
		NATS: func(name string) (*nats.Conn, error) {
			closed, log := conns.get()
			o := natsOptions(cfg, cfg.NATS.URL, name)
			o.ClosedHandler, o.ClosedOnlyWhenLost = closed, true
			// A write sent while the connection is away fails and is
			// tried again within its call: nats.go's reconnect buffer
			// would send it whenever the connection came back, after a
			// fence had given the call up and a successor had written.
			o.NoReconnectBuffer = true
			o.Logger = log
			return natsconn.Connect(o)
		},
	})
	if err != nil {
		return nil, err
	}
	for i, b := range built {
		if open := b.Open; open != nil {
			built[i].Reserve = func(ctx context.Context) (func(), error) {
				e, ok := ctx.Value(openerKey{}).(*Engine)
				if !ok {
					return func() {}, nil
				}
				if err := conns.acquire(e); err != nil {
					return nil, err
				}
				var once sync.Once
				return func() { once.Do(conns.release) }, nil
			}
			built[i].Open = func(ctx context.Context, deps map[string]any) (any, func() error, error) {
				e, ok := ctx.Value(openerKey{}).(*Engine)
				if !ok {
					return open(ctx, deps)
				}
				if err := conns.acquire(e); err != nil {
					return nil, nil, err
				}
				port, closeStore, err := open(ctx, deps)
				if err != nil {
					conns.release()
					return nil, nil, err
				}
				var once sync.Once
				return port, func() error {
					defer once.Do(conns.release)
					if closeStore == nil {
						return nil
					}
					return closeStore()
				}, nil
			}
		}
	}
	return built, nil
}

// openerKey keys the engine that opens the stores in the context of their
// open (openLocal) and of their reservation (reserveStorage).
type openerKey struct{}

// reserveStorage reserves built for e, for as long as e may open it, and
// returns what gives it back. It runs before e's start reaches the broker:
// an engine refused the storage after its claim had claimed the lease for
// nothing, and, had the lease been free or its holder silent, had taken it,
// served no call, and released it, a standby of the account meanwhile
// seeing another engine take the lease it waited for.
func reserveStorage(ctx context.Context, e *Engine, built []storage.Built) (func(), error) {
	ctx = context.WithValue(ctx, openerKey{}, e)
	var releases []func()
	releaseAll := func() {
		for _, r := range slices.Backward(releases) {
			r()
		}
	}
	for _, b := range built {
		if b.Reserve == nil {
			continue
		}
		release, err := b.Reserve(ctx)
		if err != nil {
			releaseAll()
			return nil, err
		}
		releases = append(releases, release)
	}
	return releaseAll, nil
}

// storageConns are what the stores of one BuildStorage report to, once the
// engine that opens them has bound them to itself: closed runs when one of
// their connections closes for good on its own (a close the store makes
// itself, at a failed open or at the engine's stop, does not run it), and
// log is what the stores, and what the broker refuses their connections
// (such as a bucket the engine user's permissions do not cover), are
// logged on, as for the engine's own connections. Before, the engine's
// graph alone set them, and the stores of an engine made with NewEngine
// logged on slog.Default(), and their connections could close for good
// with the engine serving on, failing every call of their service.
//
// They are bound to one engine at a time: that engine, while it has them
// reserved or any store it opened of them is open (holding). Before, the engine that opened them
// last bound them, though another still had stores of them open: those
// logged on the last one's log from then on, and a store of the first
// that dialed after the last had bound them told the last, not the first,
// when its connection closed for good, so the first served on with a
// service whose every call failed.
type storageConns struct {
	mu      sync.Mutex
	closed  func(*nats.Conn)
	log     *slog.Logger
	owner   *Engine
	holding int // stores the owner opened and has not closed
}

// acquire binds c to e for one store e opens, or for its reservation,
// unless another engine holds c.
func (c *storageConns) acquire(e *Engine) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holding > 0 && c.owner != e {
		return fmt.Errorf("engine %s has this storage: what one BuildStorage call builds serves one engine at a time; build it for each engine", c.owner.Me().InstanceID)
	}
	c.owner, c.closed, c.log = e, e.connectionClosed, e.log
	c.holding++
	return nil
}

// release ends the hold of one store the owner opened, or of its
// reservation.
func (c *storageConns) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holding--
}

func (c *storageConns) get() (func(*nats.Conn), *slog.Logger) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed, c.log
}

// storesHandler hands what the stores log to the log of the engine that
// opened them, or to slog.Default() before one has: the stores take their
// logger when they are built, before an engine opens them.
type storesHandler struct {
	conns *storageConns
	with  []func(slog.Handler) slog.Handler
}

func (h storesHandler) target() slog.Handler {
	_, log := h.conns.get()
	if log == nil {
		log = slog.Default()
	}
	t := log.Handler()
	for _, w := range h.with {
		t = w(t)
	}
	return t
}

func (h storesHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.target().Enabled(ctx, l)
}

func (h storesHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.target().Handle(ctx, r)
}

func (h storesHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return h.and(func(t slog.Handler) slog.Handler { return t.WithAttrs(attrs) })
}

func (h storesHandler) WithGroup(name string) slog.Handler {
	return h.and(func(t slog.Handler) slog.Handler { return t.WithGroup(name) })
}

func (h storesHandler) and(w func(slog.Handler) slog.Handler) slog.Handler {
	return storesHandler{conns: h.conns, with: append(slices.Clip(h.with), w)}
}

// natsOptions are the options of a connection to url with the configured
// credentials.
func natsOptions(cfg *config.Config, url, name string) natsconn.Options {
	c := cfg.NATS.Credentials
	return natsconn.Options{
		URL: url, Name: name,
		CredsFile: c.CredsFile, NkeySeedFile: c.NkeySeedFile, User: c.User, Password: c.Password,
		Token: c.Token, CA: c.TLS.CA, Cert: c.TLS.Cert, Key: c.TLS.Key,
		InboxPrefix: cfg.NATS.InboxPrefix,
	}
}

// CheckStorage is the shared-backend check: a serving engine with a rollout
// id refuses local backends, before anything opens or the lease is touched.
// A client engine owns no service, so it passes. The refusal is an error
// about nats.engine.rollout_id that says where the id came from (the file's
// line, or ABI_ROLLOUT_ID): the operator changes either the backends it
// names or that.
func CheckStorage(cfg *config.Config, built []storage.Built) error {
	if cfg.Role() == domain.RoleClient {
		return nil
	}
	if err := storagepolicy.Check(cfg.NATS.Engine.RolloutID, storage.Declarations(built)); err != nil {
		return cfg.ErrorAt("nats.engine.rollout_id", err)
	}
	return nil
}

// local are the opened backends, by service.
type local struct {
	opened []storage.Opened
}

func openLocal(ctx context.Context, built []storage.Built) (*local, error) {
	opened, err := storage.Open(ctx, built)
	if err != nil {
		return nil, err
	}
	return &local{opened: opened}, nil
}

func (l *local) close() error {
	if l == nil {
		return nil
	}
	return storage.Close(l.opened)
}

// endTerm ends the serving term up to token in every store that keeps
// something for it (ports.TermEnder).
func (l *local) endTerm(token uint64) {
	if l == nil {
		return
	}
	for _, o := range l.opened {
		if t, ok := o.Port.(ports.TermEnder); ok {
			t.EndTerm(token)
		}
	}
}

// holdRaise tells every store that raises a fence at a term's first
// write (ports.RaiseHolder) to hold that raise for token until clock
// reads until; one that reads it already raises the fence at once.
func (l *local) holdRaise(token uint64, until time.Time, clock domain.Clock) {
	for _, o := range l.opened {
		if h, ok := o.Port.(ports.RaiseHolder); ok {
			h.HoldRaise(token, until, clock)
		}
	}
}

// port returns the first opened port of a service.
func (l *local) port(service string) any {
	for _, o := range l.opened {
		if o.Service == service {
			return o.Port
		}
	}
	return nil
}

// secrets are every opened secret source, asked in order.
func (l *local) secrets() ports.Secrets {
	var chain secretChain
	for _, o := range l.opened {
		if s, ok := o.Port.(ports.Secrets); ok && o.Service == ports.ServiceSecret {
			chain = append(chain, s)
		}
	}
	if len(chain) == 0 {
		return nil
	}
	return chain
}

// kernelServices are the services a serving engine answers on NATS. The
// secret service is served only when callers must sign: without a caller
// secret, anyone on the NATS account could read every secret.
func (l *local) kernelServices(signed bool, transfers *natsapi.TransferHost) []natsapi.Service {
	var out []natsapi.Service
	if kv, ok := l.port(ports.ServiceKeyValue).(ports.KeyValue); ok {
		out = append(out, natsapi.KeyValue(withTestHooks(kv)))
	}
	if docs, ok := l.port(ports.ServiceDocument).(ports.DocumentStore); ok {
		out = append(out, natsapi.Document(docs))
	}
	if vs, ok := l.port(ports.ServiceVectorStore).(ports.VectorStore); ok {
		out = append(out, natsapi.VectorStore(vs))
	}
	if objects, ok := l.port(ports.ServiceObjectStorage).(ports.ObjectStorage); ok {
		out = append(out, natsapi.ObjectStorage(withObjectTestHooks(objects), transfers))
	}
	if c, ok := l.port(ports.ServiceCache).(ports.Cache); ok {
		out = append(out, natsapi.Cache(c))
	}
	if secrets := l.secrets(); secrets != nil && signed {
		out = append(out, natsapi.Secret(secrets))
	}
	return out
}

// sweepJobs remove expired entries from the stores that keep them.
func (l *local) sweepJobs() []Job {
	var out []Job
	for _, o := range l.opened {
		if e, ok := o.Port.(ports.Expirer); ok {
			out = append(out, Job{Name: "sweep-expired-" + o.Service, Every: time.Minute, Run: func(ctx context.Context) error {
				_, err := e.DeleteExpired(ctx)
				return err
			}})
		}
	}
	return out
}

// facades are the services as clients of the serving engine: those the
// configuration offers.
func facades(c *natsclient.Client, cfg *config.Config) Services {
	var s Services
	if Offers(cfg, ports.ServiceKeyValue) {
		s.KeyValue = natsclient.NewKeyValue(c)
	}
	if Offers(cfg, ports.ServiceDocument) {
		s.Document = natsclient.NewDocument(c)
	}
	if Offers(cfg, ports.ServiceVectorStore) {
		s.VectorStore = natsclient.NewVectorStore(c)
	}
	if Offers(cfg, ports.ServiceObjectStorage) {
		s.ObjectStorage = natsclient.NewObjectStorage(c)
	}
	if Offers(cfg, ports.ServiceCache) {
		s.Cache = natsclient.NewCache(c)
	}
	if Offers(cfg, ports.ServiceSecret) {
		s.Secrets = natsclient.NewSecrets(c)
	}
	return s
}

// Offers reports whether an engine on cfg gives its modules and its
// commands the named service, whatever its claim decides: a block of it
// is not switched off, and, for secrets, callers sign, as the secret
// service is served only then.
func Offers(cfg *config.Config, service string) bool {
	if service == ports.ServiceSecret && cfg.NATS.CallerSecret == "" {
		return false
	}
	for _, b := range cfg.Blocks() {
		if b.Name == service && !b.Service.Off() {
			return true
		}
	}
	return false
}

// secretsOn reports whether the configuration has a secret source that is
// not switched off.
func secretsOn(cfg *config.Config) bool {
	for _, b := range cfg.Blocks() {
		if b.Name == ports.ServiceSecret && !b.Service.Off() {
			return true
		}
	}
	return false
}

// secretChain asks each source in turn; a name found nowhere is not found.
type secretChain []ports.Secrets

func (c secretChain) Get(ctx context.Context, name string) (string, error) {
	for _, s := range c {
		v, err := s.Get(ctx, name)
		if !errors.Is(err, ports.ErrNotFound) {
			return v, err
		}
	}
	return "", fmt.Errorf("secret %q: %w", name, ports.ErrNotFound)
}

func (c secretChain) List(ctx context.Context) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, s := range c {
		names, err := s.List(ctx)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}
