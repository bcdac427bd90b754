package natsapi

import (
	"context"
	"errors"
)

// SessionHost is anything that holds calls or sessions a handover must let
// finish: the kernel endpoints, a transfer host, the overflow host.
type SessionHost interface {
	// StopAccepting ends its queue subscriptions at the broker; sessions
	// already open go on, on their owner subjects.
	StopAccepting(ctx context.Context) error
	// Wait returns once every call and session it holds is finished.
	Wait(ctx context.Context) error
	// Stop closes whatever is left.
	Stop()
}

// Drain hands a set of hosts over: every host stops accepting, then their
// sessions get until ctx's deadline to finish, then everything is stopped.
// It waits twice, because a call answered during the first wait can open
// a session (a parked overflow reply) on a host that had already finished.
// It reports whether everything finished before the deadline.
func Drain(ctx context.Context, hosts ...SessionHost) (bool, error) {
	var errs []error
	for _, h := range hosts {
		if err := h.StopAccepting(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	finished := true
	for range 2 {
		for _, h := range hosts {
			if err := h.Wait(ctx); err != nil {
				finished = false
			}
		}
	}
	for _, h := range hosts {
		h.Stop()
	}
	return finished, errors.Join(errs...)
}
