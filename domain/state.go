package domain

import "fmt"

// State is where an engine stands with the lease.
type State int32

const (
	// StateIdle: not holding the lease and not waiting for it.
	StateIdle State = iota
	// StateStandby: another release holds the lease; this engine waits for it.
	StateStandby
	// StateServing: the lease is ours and was renewed less than half a lease ago.
	StateServing
	// StateFenced: the lease may still be ours, but the engine does not
	// serve: no renewal succeeded for half a lease, it made the lease key
	// anew after someone deleted it and holds it a lease first, or the store
	// refused to make the key anew for a setting of its own
	// (Transition.Reason says which). It keeps renewing.
	StateFenced
	// StateLost: another engine took the lease. Terminal.
	StateLost
	// StateReleased: the engine gave the lease up on shutdown. Terminal.
	StateReleased
)

func (s State) String() string {
	switch s {
	case StateIdle:
		return "idle"
	case StateStandby:
		return "standby"
	case StateServing:
		return "serving"
	case StateFenced:
		return "fenced"
	case StateLost:
		return "lost"
	case StateReleased:
		return "released"
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// Transition is one change of state, reported to observers in the order it
// happened.
type Transition struct {
	From, To State
	// Record is the lease as the engine saw it when it moved.
	Record Record
	// Previous is the holder the lease was taken from, on the first move to
	// serving: a silent one, or one that released it. Zero when the key was
	// absent or deleted.
	Previous Holder
	// Reason says why, where the states alone do not: a standby that gives
	// up, a lease lost to whom, a fence for want of a renewal or over a
	// lease key made anew.
	Reason string
	// Term is the fencing token of the hold the engine serves under on a
	// move to serving: the lease revision at which that hold began.
	Term uint64
	// HandedOver is set on the move to released when the released record
	// was written: the lease was ours until then, and a standby may serve
	// from then on. Unset, the release found the lease no longer ours, or
	// could not tell.
	HandedOver bool
}

func (t Transition) String() string { return t.From.String() + " -> " + t.To.String() }
