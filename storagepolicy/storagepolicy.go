// Package storagepolicy is the shared-backend check. An engine started with
// a rollout id may stand by while the engine it replaces still serves, and
// then take over its services; that only works when both reach the same
// data. So before any backend opens or the lease is touched, every service
// the engine owns must keep its data where every engine reaches it.
package storagepolicy

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/abi-engine/engine/ports"
)

// ErrLocalBackends: a rollout id is set but a service the engine owns keeps
// its data on this host. Match *Error for which services.
var ErrLocalBackends = errors.New("a rollout needs shared backends")

// Declaration is what the configuration says about one service, before
// anything opens.
type Declaration struct {
	// Service is the service's name, ports.ServiceKeyValue and the like.
	Service string
	// Adapter is the adapter's name in the configuration: "sqlite", "s3",
	// or the name any other adapter was registered under.
	Adapter string
	// Off: the service is switched off, so the engine neither owns nor
	// serves it.
	Off bool
	// Storage is the adapter's configuration. A cache tier's says where
	// the service it uses keeps its data.
	Storage ports.StorageConfig
}

// Local is one service whose data stays on this host.
type Local struct {
	Service string
	Where   string
}

// Error lists the services that keep their data on this host. It matches
// ErrLocalBackends.
type Error struct {
	RolloutID string
	Local     []Local
}

func (e *Error) Error() string {
	parts := make([]string, len(e.Local))
	for i, l := range e.Local {
		if i == 0 {
			parts[i] = l.Service + " keeps its data in " + l.Where
		} else {
			parts[i] = l.Service + " in " + l.Where
		}
	}
	list := parts[0]
	if n := len(parts); n > 1 {
		list = strings.Join(parts[:n-1], ", ") + " and " + parts[n-1]
	}
	return fmt.Sprintf("rollout %q needs shared backends, but %s", e.RolloutID, list)
}

func (e *Error) Unwrap() error { return ErrLocalBackends }

// serviceOrder is the order services are named in, whatever order the
// declarations come in.
var serviceOrder = []string{
	ports.ServiceKeyValue, ports.ServiceDocument, ports.ServiceObjectStorage,
	ports.ServiceVectorStore, ports.ServiceCache, ports.ServiceSecret,
}

func rank(service string) int {
	if i := slices.Index(serviceOrder, service); i >= 0 {
		return i
	}
	return len(serviceOrder)
}

// Check applies the rules. Without a rollout id every backend is fine: no
// other release waits to take over, and a hot standby of the same release
// (ADR 0005) is meant for one host, where it shares the holder's files. With one, each service the engine owns must keep
// its data where every engine reaches it; secrets are deployment
// configuration and always pass. The error names every offending service and where its
// data is.
func Check(rolloutID string, services []Declaration) error {
	if rolloutID == "" {
		return nil
	}
	var local []Local
	for _, d := range sortedByService(services) {
		if where := whereLocal(d); where != "" {
			local = append(local, Local{Service: d.Service, Where: where})
		}
	}
	if len(local) == 0 {
		return nil
	}
	return &Error{RolloutID: rolloutID, Local: local}
}

func sortedByService(services []Declaration) []Declaration {
	out := slices.Clone(services)
	slices.SortStableFunc(out, func(a, b Declaration) int { return rank(a.Service) - rank(b.Service) })
	return out
}

// whereLocal says where a declaration keeps its data when that is on this
// host, and "" when it passes.
func whereLocal(d Declaration) string {
	switch {
	case d.Off, d.Service == ports.ServiceSecret:
		return ""
	case d.Storage == nil:
		// Fail safe: an adapter that cannot say where its data is may well
		// keep it here.
		return fmt.Sprintf("the adapter %q, which does not say where its data lives", d.Adapter)
	}
	return d.Storage.LocalStorage()
}
