package nats_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
)

// A caller chooses the reply subject of its calls, and the engine's user
// may publish where the caller's may not: into the lease key, on the
// JetStream API, on the events subject. The engine answers only into
// inboxes, so a call whose reply names one of those is dropped, and the
// lease stays the engine's. Before, a call's 400 (or, with caller
// signatures required, an unsigned call's 401) was written into the lease
// key, and the engine lost its lease and stopped.
func TestACallerCannotChooseWhereTheEngineWrites(t *testing.T) {
	for _, signed := range []bool{false, true} {
		t.Run(fmt.Sprintf("signatures required %v", signed), func(t *testing.T) {
			d := natstest.StartDeployed(t)
			path := userFile(t, d, "engine_a", "role: serve")
			if signed {
				creds := fmt.Sprintf("{user: engine_a, password: %q}\n  caller_secret: %q", natstest.Password("engine_a"), strings.Repeat("k", 40))
				path = engineFile(t, d.Server.ClientURL(), creds, "role: serve")
			}
			a := startEngine(t, path)
			ops := d.Connect(t, "ops_a")
			written, err := ops.SubscribeSync(">")
			if err != nil {
				t.Fatal(err)
			}
			if err := ops.Flush(); err != nil {
				t.Fatal(err)
			}

			caller := d.Connect(t, "caller_a")
			targets := []string{"$KV.ABI_ENGINE.owner", "$JS.API.STREAM.PURGE.KV_ABI_ENGINE", "abi.engine.events", "abi.svc.keyvalue.v1.set"}
			for _, target := range targets {
				call := nats.NewMsg(wire.Subject("keyvalue", wire.KVGet))
				call.Reply = target
				call.Data = []byte("not json")
				if err := caller.PublishMsg(call); err != nil {
					t.Fatal(err)
				}
			}
			// A call of the caller's own, answered, comes after them: by
			// then the engine has dealt with every one.
			if _, err := natsclient.New(caller).Request(t.Context(), wire.Subject("keyvalue", wire.KVGet), []byte(`{"key":"k"}`), nil); err == nil && signed {
				t.Fatal("an unsigned call was served where signatures are required")
			}
			if err := ops.Flush(); err != nil {
				t.Fatal(err)
			}
			for {
				m, err := written.NextMsg(time.Millisecond)
				if err != nil {
					break
				}
				if m.Header.Get(wire.ErrorCodeHeader) != "" && !strings.HasPrefix(m.Subject, wire.InboxPrefix) {
					t.Errorf("the engine answered a caller's call on %s", m.Subject)
				}
			}
			if st := a.Ownership().State(); st != domain.StateServing {
				t.Fatalf("after the calls the engine is %v", st)
			}
		})
	}
}
