package natsclient_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/tcpproxy"
	"github.com/abi-engine/engine/internal/wire"
)

// A call its connection refuses while it reconnects, having no reconnect
// buffer, was never sent: it is answered unavailable (503), which says so,
// not as a failure of unknown outcome.
func TestACallRefusedWhileItsConnectionReconnectsIsUnavailable(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	proxy := tcpproxy.Start(t, strings.TrimPrefix(url, "nats://"))
	nc := natstest.Connect(t, "nats://"+proxy.Addr(), nats.ReconnectBufSize(-1), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	kv := natsclient.NewKeyValue(natsclient.New(nc))
	reconnecting := make(chan struct{})
	var once sync.Once
	nc.SetDisconnectErrHandler(func(*nats.Conn, error) { once.Do(func() { close(reconnecting) }) })
	proxy.Down()
	select {
	case <-reconnecting:
	case <-time.After(30 * time.Second):
		t.Fatal("the connection never noticed the broker was gone")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err := kv.Get(ctx, "k")
	if !errors.Is(err, wire.ErrUnavailable) || !errors.Is(err, nats.ErrReconnectBufExceeded) {
		t.Fatalf("a get while the connection reconnects: %v, want unavailable", err)
	}
}
