package natsconn_test

import (
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/natsconn"
	"github.com/abi-engine/engine/internal/natstest"
)

// The broker names a connection's account: each deployed account by its
// name, and the one account of a server without accounts as "$G".
func TestTheBrokerNamesAConnectionsAccount(t *testing.T) {
	d := natstest.StartDeployed(t)
	for user, want := range map[string]string{"engine_a": "TEAM_A", "engine_b": "TEAM_B"} {
		got, err := natsconn.Account(t.Context(), d.Connect(t, user))
		if err != nil || got != want {
			t.Errorf("%s is in account %q (%v), want %q", user, got, err, want)
		}
	}
	plain := natstest.Connect(t, natstest.StartServer(t).ClientURL())
	if got, err := natsconn.Account(t.Context(), plain); err != nil || got != "$G" {
		t.Errorf("a server without accounts names %q (%v), want \"$G\"", got, err)
	}
}
