package app

import (
	"strings"
	"testing"

	"github.com/abi-engine/engine/domain"
)

// The activity log tells what happened to the lease as the engine's
// ownership saw it: a fence says why, as the transition does (before, every
// fence read as failed renewals, also one over a lease key someone deleted
// and the engine made anew), and an engine that stops while it holds the
// key in its quarantine, before it came to serve, is logged as having left
// the lease unreleased, as its successor must wait it out (before, it read
// as a standby that stopped).
func TestTheActivityLogSaysWhyAnEngineFencedAndThatAHoldLeftInItsQuarantineWasNotReleased(t *testing.T) {
	me := domain.Holder{InstanceID: "me"}
	other := domain.Holder{InstanceID: "other"}
	const anew = "the lease key was deleted by someone else and made anew; it is held 20s before the engine serves again"
	for _, c := range []struct {
		name         string
		tr           domain.Transition
		event, inDet string
	}{
		{"fenced over a key made anew", domain.Transition{From: domain.StateServing, To: domain.StateFenced, Reason: anew, Record: domain.Record{Holder: me, Present: true}}, EventFenced, anew},
		{"fenced for want of renewals", domain.Transition{From: domain.StateServing, To: domain.StateFenced, Reason: "no renewal succeeded for half a lease", Record: domain.Record{Holder: me, Present: true}}, EventFenced, "no renewal succeeded"},
		{"stopped in its quarantine", domain.Transition{From: domain.StateIdle, To: domain.StateReleased, Record: domain.Record{Holder: me, Present: true}}, EventNotReleased, "without writing its release"},
		{"a standby stopped", domain.Transition{From: domain.StateStandby, To: domain.StateReleased, Record: domain.Record{Holder: other, Present: true}}, EventStandbyStopped, "before it served"},
		{"released", domain.Transition{From: domain.StateServing, To: domain.StateReleased, HandedOver: true, Record: domain.Record{Holder: me, Present: true}}, EventReleased, "released the lease"},
	} {
		event, detail, ok := eventOf(c.tr, me, domain.Holder{})
		if !ok || event != c.event || !strings.Contains(detail, c.inDet) {
			t.Errorf("%s: logged %q %q (kept %v), want %q saying %q", c.name, event, detail, ok, c.event, c.inDet)
		}
	}
}
