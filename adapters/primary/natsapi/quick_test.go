package natsapi_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// A call its endpoint can answer at once is answered where it arrives,
// under the same admission as any other: it needs no slot, it carries the
// term's token, a call the lease does not admit is not tried, and a call
// the quick answer declines goes to the handler.
func TestAQuickAnswerIsAdmittedButNeedsNoSlot(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	started, release := make(chan struct{}, 1), make(chan struct{})
	var quick, slow atomic.Int64
	svc := natsapi.Service{Name: "echo", Endpoints: []natsapi.Endpoint{{
		Name: "say",
		Handler: func(ctx context.Context, call *natsapi.Call) ([]byte, error) {
			slow.Add(1)
			if string(call.Data) == "hold" {
				started <- struct{}{}
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return []byte("handler"), nil
		},
		Quick: func(ctx context.Context, call *natsapi.Call) ([]byte, bool, error) {
			if string(call.Data) != "quick" {
				return nil, false, nil
			}
			quick.Add(1)
			token, _ := ports.FencingToken(ctx)
			return fmt.Appendf(nil, "quick under term %d", token), true, nil
		},
	}}}
	var admit atomic.Bool
	admit.Store(true)
	newHost(t, url, natsapi.Options{MaxConcurrent: 1, MaxQueued: 1,
		Admit: func() (uint64, bool) { return 9, admit.Load() }}, svc)
	nc := natstest.Connect(t, url)
	say := func(body string) (string, error) {
		msg, err := nc.Request(sayer, []byte(body), 10*time.Second)
		if err != nil {
			return "", err
		}
		if err := wire.ErrorFromHeaders(msg.Header.Get(wire.ErrorCodeHeader), msg.Header.Get(wire.ErrorHeader)); err != nil {
			return "", err
		}
		return string(msg.Data), nil
	}

	held := make(chan error, 1)
	go func() { _, err := say("hold"); held <- err }()
	<-started // the one slot is taken
	if got, err := say("quick"); err != nil || got != "quick under term 9" {
		t.Fatalf("a quick call while the only slot is held = %q, %v; want the quick answer under term 9", got, err)
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("the call that held the slot: %v", err)
	}
	if got, err := say("decline"); err != nil || got != "handler" {
		t.Fatalf("a declined quick call = %q, %v; want the handler's answer", got, err)
	}
	admit.Store(false)
	before := quick.Load()
	if _, err := say("quick"); !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("a quick call the lease does not admit: err %v, want ErrUnavailable", err)
	}
	if quick.Load() != before {
		t.Fatal("the quick answer ran for a call the lease did not admit")
	}
}
