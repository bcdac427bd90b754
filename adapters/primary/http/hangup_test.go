package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	httpapi "github.com/abi-engine/engine/adapters/primary/http"
	"github.com/abi-engine/engine/adapters/primary/natsapi"
	kvmemory "github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// slowGetKV holds every Get until its gate opens, and tells getting when
// one begins. It has no quick answers: every get reaches Get.
type slowGetKV struct {
	ports.KeyValue
	getting chan struct{}
	gate    chan struct{}
}

func (s slowGetKV) Get(ctx context.Context, key string) ([]byte, error) {
	select {
	case s.getting <- struct{}{}:
	default:
	}
	<-s.gate
	return s.KeyValue.Get(ctx, key)
}

// A client that hangs up while the engine answers its GET of a large value
// leaves nothing parked: the engine parks the answer all the same, under
// the share of the API, which reaches the engine as one caller for all its
// clients, and the API now fetches and frees it. Before, the hang-up ended
// the call, the parked answer held the API's share until the engine's idle
// time, and every other client's GET of a large value was refused 413.
func TestAClientThatHangsUpLeavesNoAnswerParkedUnderTheAPIsShare(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	inner, err := kvmemory.Open(t.Context(), kvmemory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("v", 2<<20) // more than one message holds: its answer is parked
	if err := inner.Set(t.Context(), "big", []byte(big), 0); err != nil {
		t.Fatal(err)
	}
	kv := slowGetKV{KeyValue: inner, getting: make(chan struct{}, 1), gate: make(chan struct{})}
	owner := domain.NewInstanceID()
	session := natstest.Connect(t, url)
	// One parked answer is the API's whole share, and the idle time is far
	// longer than the test, so only a fetch or a close frees it.
	overflow, err := natsapi.NewOverflowHost(natsapi.OverflowOptions{Owner: owner, Conn: session, MaxOpenPerCaller: 1, Idle: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	answered := make(chan struct{}, 8) // once the engine has answered a call, parked or not
	host, err := natsapi.NewHost(natsapi.Options{
		Owner:    owner,
		Connect:  func() (*nats.Conn, error) { return nats.Connect(url) },
		Replies:  session,
		Overflow: overflow,
		OnCall:   func(string, string, int, time.Duration) { answered <- struct{}{} },
	}, natsapi.KeyValue(kv))
	if err != nil {
		t.Fatal(err)
	}
	for _, serve := range []func() error{overflow.Serve, host.Serve} {
		if err := serve(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		host.Stop()
		overflow.Stop()
	})
	a := serveAPI(t, httpapi.Services{KeyValue: natsclient.NewKeyValue(natsclient.New(natstest.Connect(t, url)))}, httpapi.Options{})

	ctx, hangUp := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, "GET", a.url+"/v1/kv/big", nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
		}
	}()
	<-kv.getting
	hangUp()
	<-done
	close(kv.gate) // the engine answers, and parks the answer, after the client has gone
	<-answered

	deadline := time.Now().Add(20 * time.Second)
	for overflow.Open() != 0 || overflow.Parked() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("20s after the client hung up, %d answers of %d bytes are still parked under the API's share",
				overflow.Open(), overflow.Parked())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, got := a.expect(http.StatusOK, "GET", "/v1/kv/big", ""); got != big {
		t.Fatalf("another client's GET of the large value read %d bytes, want %d", len(got), len(big))
	}
}
