package httpapi_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	httpapi "github.com/abi-engine/engine/adapters/primary/http"
	"github.com/abi-engine/engine/adapters/primary/natsapi"
	kvmemory "github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	objmemory "github.com/abi-engine/engine/adapters/secondary/objectstorage/memory"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// heldKeyValue is a key-value store whose sets of keys starting with
// "held-" wait until release is closed, as a slow backend's would: the
// calls that make them hold a slot of the engine meanwhile. Embedding the
// interface hides the memory store's QuickGet, so every call is admitted
// as a slow store's is.
type heldKeyValue struct {
	ports.KeyValue
	release <-chan struct{}
	held    atomic.Int64
}

func (h *heldKeyValue) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if strings.HasPrefix(key, "held-") {
		h.held.Add(1)
		select {
		case <-h.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return h.KeyValue.Set(ctx, key, value, ttl)
}

// heldKernel serves kv alone behind a real host, with the engine's bounds
// of calls, on an embedded broker, and returns its facade as the app
// gives it to the API: every HTTP client reaches the engine as one caller.
func heldKernel(t *testing.T, kv ports.KeyValue) httpapi.Services {
	t.Helper()
	url := natstest.StartServer(t).ClientURL()
	host, err := natsapi.NewHost(natsapi.Options{
		Owner:   domain.NewInstanceID(),
		Connect: func() (*nats.Conn, error) { return nats.Connect(url) },
		Replies: natstest.Connect(t, url),
		Logger:  slog.New(slog.DiscardHandler),
	}, natsapi.KeyValue(kv))
	if err != nil {
		t.Fatal(err)
	}
	if err := host.Serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Stop)
	return httpapi.Services{KeyValue: natsclient.NewKeyValue(natsclient.New(natstest.Connect(t, url)))}
}

// One client has at most its share of the API's requests in flight: past
// it, its requests are refused 503 at once, naming the share, and another
// client's request is served meanwhile. Every HTTP client reaches the
// engine as the API's one caller, so a client with many slow calls in
// flight took the API's every running slot and waiting place on the
// engine, and another client's call waited behind them or was refused.
func TestOneClientHasOnlyItsShareOfTheRequestsInFlight(t *testing.T) {
	const (
		sent  = httpapi.MaxConnsPerClient // each on a connection of its own
		share = 32                        // a quarter of the API's 128
	)
	release := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	kv, err := kvmemory.Open(t.Context(), kvmemory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	held := &heldKeyValue{KeyValue: kv, release: release}
	url := serveReal(t, heldKernel(t, held), httpapi.Options{})

	greedy := clientFrom("127.0.4.1")
	answers := make(chan answer, sent)
	for i := range sent {
		got := send(greedy, fmt.Sprintf("%s/v1/kv/held-%d", url, i), strings.NewReader("v"), 1)
		go func() { answers <- <-got }()
	}
	var refused []answer
	// Every request beyond the share refused, or the engine's every
	// running slot (64) taken by the client's calls.
	waitUntil(t, func() bool {
		for {
			select {
			case a := <-answers:
				refused = append(refused, a)
				continue
			default:
			}
			break
		}
		n := held.held.Load()
		return n+int64(len(refused)) == sent || n == natsapi.DefaultMaxConcurrent
	})
	if n := held.held.Load(); n > share {
		t.Fatalf("a client sending %d slow requests at once had %d of them running on the engine, past its share of %d", sent, n, share)
	}
	for _, a := range refused {
		if a.code != http.StatusServiceUnavailable || a.retryAfter == "" || !strings.Contains(a.body, "share") {
			t.Fatalf("a request past the client's share got %d (Retry-After %q): %s", a.code, a.retryAfter, a.body)
		}
	}

	bystander := clientFrom("127.0.4.2")
	if a := <-send(bystander, url+"/v1/kv/bystander", strings.NewReader("mine"), 4); a.code != http.StatusNoContent {
		t.Fatalf("a bystander's PUT, while another client had its share of requests in flight, answered %d: %s", a.code, a.body)
	}
	close(release)
	for range share {
		if a := <-answers; a.code != http.StatusNoContent {
			t.Fatalf("a request within the client's share answered %d: %s", a.code, a.body)
		}
	}
}

// heldObjects is an object store whose Stats of keys starting with
// "held-" wait until release is closed, as a slow backend's would.
type heldObjects struct {
	ports.ObjectStorage
	release <-chan struct{}
	held    atomic.Int64
}

func (h *heldObjects) Stat(ctx context.Context, key string) (ports.ObjectInfo, error) {
	if strings.HasPrefix(key, "held-") {
		h.held.Add(1)
		select {
		case <-h.release:
		case <-ctx.Done():
			return ports.ObjectInfo{}, ctx.Err()
		}
	}
	return h.ObjectStorage.Stat(ctx, key)
}

// An object HEAD, which moves no bytes and so takes no transfer slot, is a
// request in flight like any other call of the services: past its share, a
// client's HEADs are refused 503 at once. Before, a HEAD took no slot of
// either kind, so one client looking objects up on every connection it may
// hold had as many calls running on the engine as it liked.
func TestAnObjectHeadCountsAgainstItsClientsShareOfRequests(t *testing.T) {
	const (
		sent  = httpapi.MaxConnsPerClient // each on a connection of its own
		share = 32                        // a quarter of the API's 128
	)
	release := make(chan struct{})
	t.Cleanup(sync.OnceFunc(func() { close(release) }))
	store, err := objmemory.Open(t.Context(), objmemory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	held := &heldObjects{ObjectStorage: store, release: release}
	url := serveReal(t, httpapi.Services{ObjectStorage: held}, httpapi.Options{})

	greedy := clientFrom("127.0.4.3")
	answers := make(chan int, sent)
	for i := range sent {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodHead, fmt.Sprintf("%s/v1/objects/held-%d", url, i), nil)
			resp, err := greedy.Do(req)
			if err != nil {
				answers <- 0
				return
			}
			_ = resp.Body.Close()
			answers <- resp.StatusCode
		}()
	}
	var refused []int
	waitUntil(t, func() bool {
		for {
			select {
			case code := <-answers:
				refused = append(refused, code)
				continue
			default:
			}
			break
		}
		return held.held.Load()+int64(len(refused)) == sent
	})
	if n := held.held.Load(); n > share {
		t.Fatalf("a client sending %d slow HEADs at once had %d of them running, past its share of %d", sent, n, share)
	}
	for _, code := range refused {
		if code != http.StatusServiceUnavailable {
			t.Fatalf("a HEAD past the client's share answered %d, want 503", code)
		}
	}
}
