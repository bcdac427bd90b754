package app_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/internal/natstest"
)

// Every observer of calls and of renewals hears of each: the HTTP API's
// metrics register one of each, and a team's own metrics, registered the
// same way, come next to them. Before, each registration replaced the one
// before, so adding an observer silently ended the engine's own call and
// renewal metrics, or the team's, whichever registered first.
func TestEveryObserverOfCallsAndRenewalsHearsOfThem(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	var (
		e        *app.Engine
		calls    [2]atomic.Int64
		renewals [2]atomic.Int64
	)
	register := func(e *app.Engine) {
		for i := range 2 {
			e.ObserveCalls(func(string, string, int, time.Duration) { calls[i].Add(1) })
			e.ObserveRenewals(func(bool, time.Duration) { renewals[i].Add(1) })
		}
	}
	a := fxtest.New(t, app.Graph(options(testConfig(t, url, "serve", "", memoryServices)), fx.Invoke(register)),
		fx.Populate(&e), fx.StartTimeout(30*time.Second))
	a.RequireStart()
	defer a.RequireStop()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := e.Services().KeyValue.Set(ctx, "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	heard := func() bool {
		return calls[0].Load() > 0 && calls[1].Load() > 0 && renewals[0].Load() > 0 && renewals[1].Load() > 0
	}
	for deadline := time.Now().Add(15 * time.Second); !heard() && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if !heard() {
		t.Fatalf("calls heard by the two observers: %d and %d; renewals: %d and %d; want each above 0",
			calls[0].Load(), calls[1].Load(), renewals[0].Load(), renewals[1].Load())
	}
}
