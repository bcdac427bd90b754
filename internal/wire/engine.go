package wire

// The engine service says which engine instance answers: operators and
// tests use it to see a handover happen.
const (
	ServiceEngine = "engine"
	EngineInfo    = "info"
)

// EngineInfoReply answers engine.info.
type EngineInfoReply struct {
	InstanceID string `json:"instance_id"`
	Host       string `json:"host"`
	PID        int    `json:"pid"`
	Version    string `json:"version"`
	RolloutID  string `json:"rollout_id"`
	State      string `json:"state"`
}

// EventsSubject carries every engine's lease transitions, one message each,
// so an observer (a dashboard, the chaos run) sees handovers as they happen.
const EventsSubject = "abi.engine.events"

// EngineEvent is one lease transition of one engine.
type EngineEvent struct {
	InstanceID string `json:"instance_id"`
	RolloutID  string `json:"rollout_id"`
	From       string `json:"from"`
	To         string `json:"to"`
	Revision   uint64 `json:"revision"`
	// Previous is the instance the lease was taken from, if any.
	Previous string `json:"previous,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// At is the engine's own clock, in Unix nanoseconds: for ordering one
	// engine's events, never for comparing engines.
	At int64 `json:"at"`
}
