package domain

import (
	"errors"
	"fmt"
)

// Errors of the lease store. Adapters translate their backend's conflict
// errors into these at the boundary; callers check them with errors.Is.
var (
	// ErrLeaseTaken: a create found the lease key already holding a value.
	ErrLeaseTaken = errors.New("lease taken")
	// ErrLeaseConflict: an update or delete named a revision that is not the
	// current one, or a record that does not exist.
	ErrLeaseConflict = errors.New("lease revision conflict")
)

// Errors of the ownership state machine.
var (
	// ErrAlreadyServing: another engine of this release, or one without a
	// rollout id, holds the lease and renews it. Match *HeldError for who.
	ErrAlreadyServing = errors.New("another engine already serves this NATS account")
	// ErrStandbyTimedOut: a standby did not get the lease in time.
	ErrStandbyTimedOut = errors.New("standby timed out waiting for the lease")
	// ErrLeaseLost: another engine took the lease while this one held it.
	ErrLeaseLost = errors.New("lease lost to another engine")
	// ErrInvalidConfig: a setting is out of range; the message names it.
	ErrInvalidConfig = errors.New("invalid configuration")
)

// HeldError says which engine holds the lease. It matches ErrAlreadyServing.
type HeldError struct {
	Holder Holder
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("%v: lease held by %s", ErrAlreadyServing, e.Holder)
}

func (e *HeldError) Is(target error) bool { return target == ErrAlreadyServing }
