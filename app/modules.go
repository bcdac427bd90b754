package app

import (
	"context"
	"log/slog"

	"github.com/abi-engine/engine/ports"
)

// Services are the kernel services as a module sees them: clients of the
// serving engine, so a standby's modules reach the old engine until the
// handover. Secrets are the exception on an engine that serves or stands
// by: they are read from its own sources, this deployment's configuration,
// so a standby's modules see a secret as its release has it. A service
// switched off is nil.
type Services struct {
	KeyValue      ports.KeyValue
	Document      ports.DocumentStore
	ObjectStorage ports.ObjectStorage
	VectorStore   ports.VectorStore
	Cache         ports.Cache
	Secrets       ports.Secrets
}

// serviceNames are the names a module's Needs may give, sorted.
var serviceNames = []string{
	ports.ServiceCache, ports.ServiceDocument, ports.ServiceKeyValue,
	ports.ServiceObjectStorage, ports.ServiceSecret, ports.ServiceVectorStore,
}

// ModuleEnv is what a module gets at start.
type ModuleEnv struct {
	Services Services
	// Jobs registers periodic work, run only while this engine serves. It
	// refuses a job without a name, a period above 0 or a Run, and one
	// named as a job registered already (the engine's own are named
	// sweep-expired-<service>); a module's Start returns that error, and
	// the engine does not start. A run's context
	// carries the engine's serving term: calls made on it through Services
	// are refused (503, unrun) by an engine that serves under a newer term.
	Jobs   *Jobs
	Logger *slog.Logger
}

// Module is Go code that runs inside an engine next to the kernel services.
// Provide one to the app with AsModule. One put straight into the fx value
// group "modules" runs too, but after every module given with AsModule,
// and, among others put there, in an order fx draws anew at each start:
// give a module with AsModule for its place to hold. A panic in Needs, Start or Stop is
// that call's error, naming the module: a start it fails stops the modules
// started before and releases the lease, as any failed start does.
type Module interface {
	Name() string
	// Needs names the services the module uses (ports.ServiceKeyValue...);
	// the engine refuses to start when one is switched off, or when a name
	// is no service, before it opens anything or touches the lease: its
	// graph fails (fx.New), and an engine made with NewEngine fails its
	// Start at once.
	Needs() []string
	// Start must return soon after ctx ends: ctx ends with the engine's
	// start, at its limit or an interrupt. The engine waits no longer: it
	// fails its start, naming the module, releases the lease, and stops
	// the module if its Start returns without an error later.
	//
	// Start runs in every role, on the serving engine, on a standby and
	// on an engine that only calls another's services, and so does any
	// work the module starts on its own from it (a goroutine, a
	// subscription): that work goes on whatever the lease does, and its
	// calls through env.Services carry no serving term, so an engine
	// serving under a newer term runs them as any caller's rather than
	// refuse them. Work that must run only on the engine that serves, and
	// stop when it stops serving, belongs in a Job (env.Jobs), whose runs
	// carry the term.
	Start(ctx context.Context, env ModuleEnv) error
	// Stop must return soon after ctx ends: the engine waits no longer
	// for it. It names the module in its stop's error and goes on while
	// that Stop runs: it releases a lease it still holds and closes its
	// connections and backends.
	Stop(ctx context.Context) error
}
