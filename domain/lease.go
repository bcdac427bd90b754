package domain

import (
	"context"
	"time"
)

// LeaseCallOverrun is how long a Lease call may run past its context's
// deadline (see Lease).
const LeaseCallOverrun = 2 * time.Second

// Record is the lease key as a store last reported it.
type Record struct {
	// Holder is the stored value; zero when the key holds none.
	Holder Holder
	// Revision only grows. 0 means the key was never written; a deleted key
	// keeps the revision of its deletion.
	Revision uint64
	// Present is true when the key holds a value (a live or released holder).
	Present bool
}

// Free reports whether the lease may be taken without waiting: the key is
// absent, deleted, or holds a released record.
func (r Record) Free() bool { return !r.Present || r.Holder.Released }

// Deleted reports whether the key was written once and then deleted, which
// no engine of ours does: a clean release writes a released record instead.
func (r Record) Deleted() bool { return !r.Present && r.Revision > 0 }

// Lease is the store behind the ownership lease: one key, changed only by
// compare-and-swap on its revision. The ports package names it for adapters;
// it is declared here because the state machine is its consumer.
//
// Every call returns by its context's deadline, or at most LeaseCallOverrun
// after it (after the call began, if that is later): a store may need that
// long past the deadline to learn why a call went unanswered and to repair
// what it can, as the JetStream lease does when its bucket is gone. The
// liveness check counts on that bound (Ownership.Stalled).
type Lease interface {
	// Read returns the current record.
	Read(ctx context.Context) (Record, error)
	// Create writes h if the key holds no value, and returns the new revision.
	// It fails with ErrLeaseTaken otherwise.
	Create(ctx context.Context, h Holder) (uint64, error)
	// Update writes h if rev is the current revision, and returns the new one,
	// which is greater even when h is unchanged. It fails with ErrLeaseConflict
	// otherwise.
	Update(ctx context.Context, h Holder, rev uint64) (uint64, error)
	// Delete removes the value if rev is the current revision; the deletion
	// takes a new revision. It fails with ErrLeaseConflict otherwise.
	Delete(ctx context.Context, rev uint64) error
	// Advertise raises the longest lease the store keeps beside the key to
	// at least d, and returns the longest it keeps then. It is kept apart
	// from the key, so a delete or purge of the key leaves it: an engine
	// that finds the key with no value learns from it how long an earlier
	// holder, whose record it never saw, may serve on. It only grows.
	Advertise(ctx context.Context, d time.Duration) (time.Duration, error)
	// WaitForChange returns as soon as the current revision differs from rev,
	// or the current record once timeout has passed. rev 0 waits on an absent
	// key. Only ctx ending is an error.
	WaitForChange(ctx context.Context, rev uint64, timeout time.Duration) (Record, error)
}
