package natsclient_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/adapters/secondary/objectstorage/memory"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// slowOpenStore holds every Get, the store's part of a download's open,
// until its gate opens, and tells opening when one begins.
type slowOpenStore struct {
	ports.ObjectStorage
	opening chan struct{}
	gate    chan struct{}
}

func (s slowOpenStore) Get(ctx context.Context, key string, opts ports.GetObjectOptions) (io.ReadCloser, ports.ObjectInfo, error) {
	select {
	case s.opening <- struct{}{}:
	default:
	}
	<-s.gate
	return s.ObjectStorage.Get(ctx, key, opts)
}

// A caller that gives up on a Get while the engine opens its transfer,
// by cancelling or because its deadline passes, leaves no transfer open:
// the engine opens it all the same, and its answer, which names the
// transfer, comes after the caller has left. Left open, it held one of the
// caller's share of transfers for the engine's whole idle time, so an HTTP
// client that hung up, or timed out on a slow store, during opens spent
// the HTTP API's share (every HTTP client is one caller) and the others'
// object GETs and PUTs were refused 503 for a minute.
func TestAGetGivenUpWhileItsTransferOpensLeavesNoTransferOpen(t *testing.T) {
	for _, c := range []struct {
		name   string
		giveUp func(ctx context.Context) (context.Context, context.CancelFunc)
		// now gives up as soon as the open has begun; otherwise the
		// deadline does.
		now  bool
		want error
	}{
		{"cancelled", func(ctx context.Context) (context.Context, context.CancelFunc) { return context.WithCancel(ctx) }, true, context.Canceled},
		{"deadline passed", func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, time.Second)
		}, false, context.DeadlineExceeded},
	} {
		t.Run(c.name, func(t *testing.T) {
			url := natstest.StartServer(t).ClientURL()
			inner, err := memory.Open(t.Context(), memory.Config{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := inner.Put(t.Context(), "k", bytes.NewReader([]byte("the object")), ports.PutObjectOptions{}); err != nil {
				t.Fatal(err)
			}
			store := slowOpenStore{ObjectStorage: inner, opening: make(chan struct{}, 1), gate: make(chan struct{})}
			// One transfer is the caller's whole share, and the idle time
			// is far longer than the test, so only a close frees it.
			e := serveEngineWith(t, url, natsapi.TransferOptions{MaxOpen: 4, MaxOpenPerCaller: 1, Idle: time.Hour},
				func(tr *natsapi.TransferHost) []natsapi.Service {
					return []natsapi.Service{natsapi.ObjectStorage(store, tr)}
				})
			objects := natsclient.NewObjectStorage(natsclient.New(natstest.Connect(t, url)))

			ctx, giveUp := c.giveUp(t.Context())
			defer giveUp()
			got := make(chan error, 1)
			go func() {
				_, _, err := objects.Get(ctx, "k", ports.GetObjectOptions{})
				got <- err
			}()
			<-store.opening
			if c.now {
				giveUp()
			}
			select {
			case err := <-got:
				if !errors.Is(err, c.want) {
					t.Fatalf("a Get given up while its transfer opened returned %v, want %v", err, c.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("a Get given up while its transfer opened did not return")
			}
			// The engine finishes the open after its caller has left.
			close(store.gate)

			deadline := time.Now().Add(20 * time.Second)
			for e.transfers.Open() != 0 {
				if time.Now().After(deadline) {
					t.Fatalf("%d transfers still open 20s after their caller gave up on the Get", e.transfers.Open())
				}
				time.Sleep(10 * time.Millisecond)
			}
			r, _, err := objects.Get(t.Context(), "k", ports.GetObjectOptions{})
			if err != nil {
				t.Fatalf("the caller's next Get, its share spent on the one it gave up: %v", err)
			}
			defer r.Close()
			if b, err := io.ReadAll(r); err != nil || string(b) != "the object" {
				t.Fatalf("the next Get read %q, %v", b, err)
			}
		})
	}
}

// A caller whose deadline passes while no engine serves is told no engine
// answered, as before its open waited for late answers: the HTTP API says
// 503, the handover took too long, not 504.
func TestAGetWithNoEngineServingIsUnavailableAtItsDeadline(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	objects := natsclient.NewObjectStorage(natsclient.New(natstest.Connect(t, url)))
	for _, d := range []time.Duration{300 * time.Millisecond, time.Second} {
		ctx, cancel := context.WithTimeout(t.Context(), d)
		_, _, err := objects.Get(ctx, "k", ports.GetObjectOptions{})
		cancel()
		if !errors.Is(err, wire.ErrUnavailable) {
			t.Fatalf("a Get with a %v deadline and no engine serving returned %v, want wire.ErrUnavailable", d, err)
		}
		ctx, cancel = context.WithTimeout(t.Context(), d)
		_, err = objects.Put(ctx, "k", bytes.NewReader([]byte("v")), ports.PutObjectOptions{})
		cancel()
		if !errors.Is(err, wire.ErrUnavailable) {
			t.Fatalf("a Put with a %v deadline and no engine serving returned %v, want wire.ErrUnavailable", d, err)
		}
	}
}
