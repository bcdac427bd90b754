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

// The contexts calls run under are made once a term, not once a call; a
// call still runs under the token its admission gave, quick or not, and a
// host that fenced and serves again runs its calls under the new serving
// period, not the one that ended.
func TestEachCallRunsUnderItsOwnTermsToken(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	under := func(ctx context.Context, how string) []byte {
		token, _ := ports.FencingToken(ctx)
		return fmt.Appendf(nil, "%s under term %d, live %t", how, token, ctx.Err() == nil)
	}
	svc := natsapi.Service{Name: "echo", Endpoints: []natsapi.Endpoint{{
		Name: "say",
		Handler: func(ctx context.Context, call *natsapi.Call) ([]byte, error) {
			return under(ctx, "handler"), nil
		},
		Quick: func(ctx context.Context, call *natsapi.Call) ([]byte, bool, error) {
			if string(call.Data) != "quick" {
				return nil, false, nil
			}
			return under(ctx, "quick"), true, nil
		},
	}}}
	var term atomic.Uint64
	h := newHost(t, url, natsapi.Options{Admit: func() (uint64, bool) { return term.Load(), true }}, svc)
	nc := natstest.Connect(t, url)
	say := func(body, want string) {
		t.Helper()
		msg, err := nc.Request(sayer, []byte(body), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := wire.ErrorFromHeaders(msg.Header.Get(wire.ErrorCodeHeader), msg.Header.Get(wire.ErrorHeader)); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if got := string(msg.Data); got != want {
			t.Fatalf("%s: got %q, want %q", body, got, want)
		}
	}
	for _, token := range []uint64{7, 8, 0, 9} {
		term.Store(token)
		say("quick", fmt.Sprintf("quick under term %d, live true", token))
		say("slow", fmt.Sprintf("handler under term %d, live true", token))
	}
	h.Fence()()
	if err := h.Serve(); err != nil {
		t.Fatal(err)
	}
	say("quick", "quick under term 9, live true")
	say("slow", "handler under term 9, live true")
}
