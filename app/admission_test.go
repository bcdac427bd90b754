package app

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/lease/jetstream"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
)

// heldLog holds the log record of the move to released until let closes,
// as a slow log sink would; reached is closed when it is held.
type heldLog struct {
	reached, let chan struct{}
}

func (h heldLog) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "-> released") {
		close(h.reached)
		<-h.let
	}
	return nil
}
func (h heldLog) Enabled(context.Context, slog.Level) bool { return true }
func (h heldLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h heldLog) WithGroup(string) slog.Handler            { return h }

// Once the released record is written, the engine answers what reaches it
// until drained: no moment may pass between the lease's move to released
// and the handover in which a call is refused. Session calls (a transfer's
// chunks) are not sent again on a 503, so such a moment failed transfers
// at a clean handover. Before, admission read a flag the observer set
// after the move was logged.
func TestAdmissionHasNoGapBetweenTheReleaseAndTheHandover(t *testing.T) {
	nc := natstest.Connect(t, natstest.StartServer(t).ClientURL())
	lease, err := jetstream.Open(t.Context(), nc, jetstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	log := heldLog{reached: make(chan struct{}), let: make(chan struct{})}
	var sv *serving
	o, err := domain.NewOwnership(lease, domain.ThisProcess("1.0.0", "v1"),
		domain.Timing{Lease: time.Second, StandbyTimeout: time.Minute, Drain: time.Second},
		domain.WithLogger(slog.New(log)),
		domain.WithObserver(func(tr domain.Transition) { sv.transition(tr) }))
	if err != nil {
		t.Fatal(err)
	}
	sv = newServing(slog.Default(), NewJobs(slog.Default(), nil), &suspendingClock{}, func() {}, func(error) {}, func(domain.Transition) {})
	t.Cleanup(sv.close)
	if out, err := o.Claim(t.Context(), domain.RoleServe); err != nil || out != domain.OutcomeServe {
		t.Fatalf("claim: %v, %v", out, err)
	}
	if _, ok := sv.admit(o); !ok {
		t.Fatal("the serving engine admits no call")
	}
	released := make(chan error, 1)
	go func() { released <- o.Release(context.Background()) }()
	select {
	case <-log.reached: // the record is written, and the move not yet announced
	case err := <-released:
		t.Fatalf("the release returned without announcing the move: %v", err)
	}
	rec, err := lease.Read(t.Context())
	_, ok := sv.admit(o)
	close(log.let)
	if err != nil || !rec.Holder.Released {
		t.Fatalf("the key after the release: %+v, %v; want the released record", rec, err)
	}
	if !ok {
		t.Fatalf("the released record is written (revision %d), and a call that reaches the engine now is refused", rec.Revision)
	}
	if err := <-released; err != nil {
		t.Fatal(err)
	}
}
