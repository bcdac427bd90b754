package app

import (
	"time"

	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/redact"
)

// Status is where the engine stands, for operators.
type Status struct {
	Role       string `json:"role"`
	State      string `json:"state"`
	Ready      bool   `json:"ready"`
	InstanceID string `json:"instance_id"`
	Host       string `json:"host"`
	PID        int    `json:"pid"`
	Version    string `json:"version"`
	RolloutID  string `json:"rollout_id"`
	NATS       string `json:"nats"`
	// Lease is the lease as this engine last saw or wrote it; nil for a
	// client, which never reads it.
	Lease *LeaseStatus `json:"lease,omitempty"`
	// Services says, for each service, its adapter and where its data lives
	// ("" when every engine reaches it); empty for a client.
	Services []ServiceStatus `json:"services"`
}

// LeaseStatus is the lease record and its freshness.
type LeaseStatus struct {
	Holder   HolderStatus `json:"holder"`
	Revision uint64       `json:"revision"`
	// SinceRenewal is how long ago, on this engine's clock, it last saw the
	// lease change or renewed it.
	SinceRenewal time.Duration `json:"since_renewal_ns"`
}

// HolderStatus is the lease's holder as /status shows it: the fields of
// domain.Holder under snake_case keys, like every key of /status.
type HolderStatus struct {
	InstanceID string    `json:"instance_id"`
	Host       string    `json:"host"`
	PID        int       `json:"pid"`
	Version    string    `json:"version"`
	RolloutID  string    `json:"rollout_id"`
	StartedAt  time.Time `json:"started_at"`
	Released   bool      `json:"released"`
}

func holderStatus(h domain.Holder) HolderStatus {
	return HolderStatus{
		InstanceID: h.InstanceID, Host: h.Host, PID: h.PID, Version: h.Version,
		RolloutID: h.RolloutID, StartedAt: h.StartedAt, Released: h.Released,
	}
}

// ServiceStatus is one service's adapter.
type ServiceStatus struct {
	Service string `json:"service"`
	Adapter string `json:"adapter"`
	Off     bool   `json:"off,omitempty"`
	Local   string `json:"local,omitempty"`
}

// Status reports where the engine stands now.
func (e *Engine) Status() Status {
	me := e.p.Holder
	st := Status{
		Role: e.p.Config.Role().String(), State: "client", Ready: e.Ready(),
		InstanceID: me.InstanceID, Host: me.Host, PID: me.PID, Version: me.Version, RolloutID: me.RolloutID,
		NATS: redact.URLs(e.URL()), Services: []ServiceStatus{},
	}
	if e.stopping.Load() {
		st.State = "stopping"
	}
	o := e.Ownership()
	if o == nil || e.Outcome() == domain.OutcomeClient {
		return st
	}
	if !e.stopping.Load() {
		st.State = o.State().String()
	}
	rec := o.Record()
	st.Lease = &LeaseStatus{Holder: holderStatus(rec.Holder), Revision: rec.Revision, SinceRenewal: o.SinceChange()}
	for _, b := range e.p.Storage {
		d := b.Declaration
		ss := ServiceStatus{Service: d.Service, Adapter: d.Adapter, Off: d.Off}
		if d.Storage != nil && !d.Off {
			ss.Local = d.Storage.LocalStorage()
		}
		st.Services = append(st.Services, ss)
	}
	return st
}
