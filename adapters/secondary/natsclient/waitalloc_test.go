package natsclient_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
)

// A call through the client costs no more allocations than nats.go's own
// request of the same message with its Abi-Wait header already made, both
// through one embedded broker to one responder, so that the header the
// client adds to every call costs nothing in the usual case. Formatting the
// value anew and setting it with Header.Set cost every call one or two
// allocations (BenchmarkKeyValueGet went from 33 to 36 a get).
func TestTheWaitACallSaysCostsNoAllocationOnceItsValueWasSent(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	responder := natstest.Connect(t, url)
	if _, err := responder.Subscribe("alloc.echo", func(m *nats.Msg) { _ = m.Respond(nil) }); err != nil {
		t.Fatal(err)
	}
	if err := responder.Flush(); err != nil {
		t.Fatal(err)
	}
	nc := natstest.Connect(t, url)
	c := natsclient.New(nc)
	body := []byte(`{"key":"alloc"}`)
	// Each call gets a context of its own, as a caller's call does, so the
	// wait said is about the same every time.
	call := func(send func(ctx context.Context) error) func() {
		return func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := send(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	client := call(func(ctx context.Context) error {
		_, err := c.Request(ctx, "alloc.echo", body, nil)
		return err
	})
	raw := &nats.Msg{Subject: "alloc.echo", Data: body, Header: nats.Header{wire.WaitHeader: {"10000"}}}
	direct := call(func(ctx context.Context) error {
		_, err := nc.RequestMsgWithContext(ctx, raw)
		return err
	})
	const runs = 500
	viaClient := testing.AllocsPerRun(runs, client)
	viaNATS := testing.AllocsPerRun(runs, direct)
	t.Logf("a call: %.2f allocations through the client, %.2f through nats.go with the header made", viaClient, viaNATS)
	// AllocsPerRun counts whole allocations a call, rounded down, so the
	// broker's own work in the process, which neither call causes, adds
	// less than one to either.
	if viaClient > viaNATS {
		t.Fatalf("a call through the client allocates %.2f times, nats.go's request of the same message %.2f", viaClient, viaNATS)
	}
}
