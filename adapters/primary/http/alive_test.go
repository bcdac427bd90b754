package httpapi_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	httpapi "github.com/abi-engine/engine/adapters/primary/http"
	"github.com/abi-engine/engine/adapters/secondary/lease/memory"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/leasetest"
)

// owned is an engine that holds the lease through a real Ownership and
// reports on it as the app does.
type owned struct{ o *domain.Ownership }

func (e owned) Status() any { return map[string]any{"state": e.o.State().String()} }
func (e owned) Ready() bool { return e.o.MayServe() }
func (e owned) Alive() bool { return !e.o.Stalled() }

// /healthz answers 503 once the holder's lease keeper has stopped turning,
// here on an observer that blocks, so the kubelet restarts an engine that
// neither serves nor renews; it answered 200 whatever the engine did.
func TestHealthzFailsOnceTheLeaseKeeperStopsTurning(t *testing.T) {
	block := make(chan struct{})
	var armed atomic.Bool
	store := leasetest.Wrap(memory.New())
	o, err := domain.NewOwnership(store, domain.ThisProcess("test", ""), domain.Timing{Lease: time.Second, StandbyTimeout: time.Minute},
		domain.WithLogger(slog.New(slog.DiscardHandler)),
		domain.WithObserver(func(domain.Transition) {
			if armed.Load() {
				<-block
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(block)
		store.Cut(false)
		_ = o.Release(context.Background())
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if out, err := o.Claim(ctx, domain.RoleServe); err != nil || out != domain.OutcomeServe {
		t.Fatalf("Claim = %v, %v; want serve", out, err)
	}
	srv := httptest.NewServer(httpapi.NewHandler(httpapi.Options{
		Engine: owned{o}, Metrics: httpapi.NewMetrics(), Logger: slog.New(slog.DiscardHandler),
	}))
	t.Cleanup(srv.Close)
	a := &api{t: t, url: srv.URL}
	a.expect(http.StatusOK, "GET", "/healthz", "")

	armed.Store(true)
	store.Cut(true) // the keeper fences, and its observer holds it there
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, body := a.do("GET", "/healthz", nil)
		if resp.StatusCode == http.StatusServiceUnavailable {
			if !strings.Contains(body, `"alive":false`) {
				t.Fatalf("/healthz of a stalled engine: %s", body)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz still answers %d %s with the keeper held for 30 s", resp.StatusCode, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
