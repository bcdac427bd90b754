// Package leasetest wraps a lease store in the faults a network and a
// process can cause: calls cut off, requests and replies delayed, replies
// lost after the write went through, writes refused at once, a process
// paused. The ownership tests and the exclusion simulation drive the state
// machine through it.
package leasetest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/abi-engine/engine/domain"
)

// ErrFault is what a faulted call returns in place of a reply.
var ErrFault = errors.New("injected fault")

// Faulty is a domain.Lease with faults switched on and off at run time.
// Writes are in flight once sent: a caller that gives up early does not stop
// a delayed write from reaching the store, as on a real network.
type Faulty struct {
	inner domain.Lease

	mu           sync.Mutex
	cut          bool
	uncut        chan struct{} // closed when the cut ends
	pausedUntil  time.Time
	requestDelay time.Duration
	replyDelay   time.Duration
	loseReplies  int
	refuse       int
}

var _ domain.Lease = (*Faulty)(nil)

// Wrap returns inner with no fault switched on.
func Wrap(inner domain.Lease) *Faulty { return &Faulty{inner: inner} }

// Cut makes every call hang and then fail, as when the store cannot be
// reached: until its context ends, the cut is lifted (the client's own
// timeout, in effect), or, for a watch, its timeout passes.
func (f *Faulty) Cut(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case on && !f.cut:
		f.uncut = make(chan struct{})
	case !on && f.cut:
		close(f.uncut)
	}
	f.cut = on
}

// Pause holds every call, requests and replies alike, until d has passed:
// the store's view of a process that stopped running.
func (f *Faulty) Pause(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pausedUntil = time.Now().Add(d)
}

// Delay holds every request for req before it reaches the store and every
// reply for reply before it reaches the caller.
func (f *Faulty) Delay(req, reply time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requestDelay, f.replyDelay = req, reply
}

// LoseReplies makes the next n writes reach the store but fail to answer.
func (f *Faulty) LoseReplies(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loseReplies = n
}

// RefuseWrites makes the next n writes fail at once without reaching the
// store, as a broker answers while the stream elects a leader, or a client
// whose connection is reconnecting: the caller learns quickly that nothing
// was written.
func (f *Faulty) RefuseWrites(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse = n
}

type faults struct {
	cut               bool
	uncut             <-chan struct{}
	pause, req, reply time.Duration
}

func (f *Faulty) current() faults {
	f.mu.Lock()
	defer f.mu.Unlock()
	return faults{cut: f.cut, uncut: f.uncut, pause: time.Until(f.pausedUntil), req: f.requestDelay, reply: f.replyDelay}
}

func (f *Faulty) takeLostReply() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.loseReplies > 0 {
		f.loseReplies--
		return true
	}
	return false
}

func (f *Faulty) takeRefusal() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse > 0 {
		f.refuse--
		return true
	}
	return false
}

func sleep(d time.Duration) {
	if d > 0 {
		time.Sleep(d)
	}
}

type result[T any] struct {
	v   T
	err error
}

// write sends op towards the store. Once sent it is applied whatever the
// caller does; the caller waits for the reply or for its context.
func write[T any](ctx context.Context, f *Faulty, op func(context.Context) (T, error)) (T, error) {
	var zero T
	fl := f.current()
	if fl.cut {
		select {
		case <-ctx.Done():
		case <-fl.uncut:
		}
		return zero, errors.Join(ErrFault, ctx.Err())
	}
	if f.takeRefusal() {
		return zero, ErrFault
	}
	reply := make(chan result[T], 1)
	go func() {
		sleep(max(fl.pause, fl.req))
		v, err := op(context.Background())
		if err == nil && f.takeLostReply() {
			v, err = zero, ErrFault
		}
		sleep(fl.reply)
		reply <- result[T]{v, err}
	}()
	select {
	case r := <-reply:
		return r.v, r.err
	case <-ctx.Done():
		return zero, errors.Join(ErrFault, ctx.Err())
	}
}

// Read reads through the faults.
func (f *Faulty) Read(ctx context.Context) (domain.Record, error) {
	var rec domain.Record
	err := f.read(ctx, 0, func(c context.Context) error {
		var err error
		rec, err = f.inner.Read(c)
		return err
	})
	return rec, err
}

// read is a call that changes nothing: dropped, not applied, when the caller
// gives up.
func (f *Faulty) read(ctx context.Context, limit time.Duration, op func(context.Context) error) error {
	fl := f.current()
	if fl.cut {
		var expired <-chan time.Time
		if limit > 0 {
			t := time.NewTimer(limit)
			defer t.Stop()
			expired = t.C
		}
		select {
		case <-expired:
		case <-fl.uncut:
		case <-ctx.Done():
		}
		return errors.Join(ErrFault, ctx.Err())
	}
	// A caller that gives up while its request or its reply is held
	// hears nothing more, as it would from a real client.
	if err := wait(ctx, max(fl.pause, fl.req)); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	err := op(ctx)
	if werr := wait(ctx, fl.reply); werr != nil {
		return werr
	}
	return err
}

// wait holds a read for d, or fails as a call whose answer never came
// when ctx ends first.
func wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return errors.Join(ErrFault, ctx.Err())
	}
}

// Create creates through the faults.
func (f *Faulty) Create(ctx context.Context, h domain.Holder) (uint64, error) {
	return write(ctx, f, func(c context.Context) (uint64, error) { return f.inner.Create(c, h) })
}

// Update updates through the faults.
func (f *Faulty) Update(ctx context.Context, h domain.Holder, rev uint64) (uint64, error) {
	return write(ctx, f, func(c context.Context) (uint64, error) { return f.inner.Update(c, h, rev) })
}

// Delete deletes through the faults.
func (f *Faulty) Delete(ctx context.Context, rev uint64) error {
	_, err := write(ctx, f, func(c context.Context) (struct{}, error) { return struct{}{}, f.inner.Delete(c, rev) })
	return err
}

// Advertise advertises through the cuts, pauses and delays. Lost replies
// and refusals are kept for the writes of the record, which the tests aim
// them at; a caller that gives up before it is sent raises nothing, which
// it cannot tell from a raise it does not hear of and so does not count on.
func (f *Faulty) Advertise(ctx context.Context, d time.Duration) (time.Duration, error) {
	var longest time.Duration
	err := f.read(ctx, 0, func(c context.Context) error {
		var err error
		longest, err = f.inner.Advertise(c, d)
		return err
	})
	return longest, err
}

// WaitForChange watches through the faults.
func (f *Faulty) WaitForChange(ctx context.Context, rev uint64, timeout time.Duration) (domain.Record, error) {
	var rec domain.Record
	err := f.read(ctx, timeout, func(c context.Context) error {
		var err error
		rec, err = f.inner.WaitForChange(c, rev, timeout)
		return err
	})
	return rec, err
}
