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
