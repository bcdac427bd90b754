// Package memory is a lease store inside one process: the reference for the
// lease contract and the store of the ownership simulation.
package memory

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/ports"
)

var _ ports.Lease = (*Lease)(nil)

// Lease keeps the record in memory. Every write, a delete included, takes the
// next revision, as a JetStream bucket does.
type Lease struct {
	mu      sync.Mutex
	rec     domain.Record
	seq     uint64        // the last revision taken, which a purge keeps
	longest time.Duration // the longest lease advertised, which a delete of the key keeps
	changed chan struct{} // closed and replaced on every write
}

// New returns an empty store.
func New() *Lease { return &Lease{changed: make(chan struct{})} }

// Read returns the current record.
func (l *Lease) Read(ctx context.Context) (domain.Record, error) {
	if err := ctx.Err(); err != nil {
		return domain.Record{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rec, nil
}

// Create writes h unless the key holds a value.
func (l *Lease) Create(ctx context.Context, h domain.Holder) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rec.Present {
		return 0, fmt.Errorf("create at revision %d: %w", l.rec.Revision, domain.ErrLeaseTaken)
	}
	return l.write(h, true), nil
}

// Update writes h if rev is the current revision. As on JetStream, the
// revision of a deletion counts: an update there writes the key again.
func (l *Lease) Update(ctx context.Context, h domain.Holder, rev uint64) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if rev == 0 || rev != l.rec.Revision {
		return 0, fmt.Errorf("update at revision %d, current %d: %w", rev, l.rec.Revision, domain.ErrLeaseConflict)
	}
	return l.write(h, true), nil
}

// Delete removes the value if rev is the current revision of a present key.
func (l *Lease) Delete(ctx context.Context, rev uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.rec.Present || rev != l.rec.Revision {
		return fmt.Errorf("delete at revision %d, current %d: %w", rev, l.rec.Revision, domain.ErrLeaseConflict)
	}
	l.write(domain.Holder{}, false)
	return nil
}

// Advertise raises the longest lease kept to at least d and returns it. A
// delete of the key keeps it; Purge and Recreate forget it, as they do on
// JetStream, where it is a key of the bucket's stream.
func (l *Lease) Advertise(ctx context.Context, d time.Duration) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.longest = max(l.longest, d)
	return l.longest, nil
}

// Purge removes the key and every trace of it, as a purge of the bucket's
// stream does: reads find no record at all, revision 0, and the next write
// takes the revision after the last one. The longest lease advertised goes
// with it.
func (l *Lease) Purge() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rec, l.longest = domain.Record{}, 0
	l.wake()
}

// Recreate empties the store and starts its revisions again from 1, as
// deleting the bucket and making it anew does.
func (l *Lease) Recreate() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rec, l.seq, l.longest = domain.Record{}, 0, 0
	l.wake()
}

// write stores the next record and wakes every waiter. l.mu is held.
func (l *Lease) write(h domain.Holder, present bool) uint64 {
	l.seq++
	l.rec = domain.Record{Holder: h, Revision: l.seq, Present: present}
	l.wake()
	return l.rec.Revision
}

func (l *Lease) wake() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// WaitForChange returns once the revision is not rev, or after timeout.
func (l *Lease) WaitForChange(ctx context.Context, rev uint64, timeout time.Duration) (domain.Record, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		l.mu.Lock()
		rec, changed := l.rec, l.changed
		l.mu.Unlock()
		if rec.Revision != rev {
			return rec, nil
		}
		select {
		case <-ctx.Done():
			return domain.Record{}, ctx.Err()
		case <-timer.C:
			return l.Read(ctx)
		case <-changed:
		}
	}
}
