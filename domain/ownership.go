package domain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Outcome is what a claim decided.
type Outcome int

const (
	// OutcomeServe: the lease is ours and the engine serves.
	OutcomeServe Outcome = iota
	// OutcomeStandby: another release holds the lease; call AwaitLease.
	OutcomeStandby
	// OutcomeClient: the engine uses the serving engine and never touches the lease.
	OutcomeClient
)

func (o Outcome) String() string {
	switch o {
	case OutcomeServe:
		return "serve"
	case OutcomeStandby:
		return "standby"
	case OutcomeClient:
		return "client"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Option configures an Ownership.
type Option func(*Ownership)

// WithObserver reports every transition to f, in order, from the goroutine
// that made it. f must not block and must not call back into the Ownership's
// Claim, AwaitLease or Release.
func WithObserver(f func(Transition)) Option { return func(o *Ownership) { o.observe = f } }

// WithHotStandby makes an engine that finds a live holder of its own
// release (or, without rollout ids, any live holder) stand by instead of
// failing: it waits with no timeout and takes over once the holder releases
// the lease or stays silent for a full lease, so a crash costs one lease
// period rather than a restart.
func WithHotStandby() Option { return func(o *Ownership) { o.hot = true } }

// WithRenewalObserver reports the outcome of every renewal attempt and how
// long it took, for metrics. f runs on the keeper's goroutine and must not
// block.
func WithRenewalObserver(f func(ok bool, took time.Duration)) Option {
	return func(o *Ownership) { o.renewed = f }
}

// WithClock sets the clock a holder judges its lease by. It must count the
// time the machine spends suspended, as Linux's CLOCK_BOOTTIME does: Go's
// monotonic clock stops during a suspend, so a holder resumed from one would
// otherwise believe a lease that expired while it slept is still valid.
// Without it the Ownership reads time.Now.
func WithClock(c Clock) Option { return func(o *Ownership) { o.clock = c } }

// Clock tells the time. Only differences between its readings are used.
type Clock interface{ Now() time.Time }

type goClock struct{}

func (goClock) Now() time.Time { return time.Now() }

// WithLogger sets the logger, which should carry the engine's instance id
// as the engine's own logger does. Without it, slog's default logger is
// used with the instance id added.
func WithLogger(l *slog.Logger) Option { return func(o *Ownership) { o.log = l } }

// Ownership is the state machine of one engine's lease. Claim, then AwaitLease
// for a standby, then Release run in turn on the caller's goroutine; while the
// lease is held, one keeper goroutine renews it and owns every transition.
type Ownership struct {
	lease   Lease
	me      Holder
	timing  Timing
	log     *slog.Logger
	observe func(Transition)
	renewed func(ok bool, took time.Duration)
	hot     bool
	clock   Clock
	lostOne sync.Once

	mu         sync.Mutex
	state      State
	record     Record    // the lease as last seen; our own revision while we hold it
	observedAt time.Time // when record's revision was first seen (standby)
	validUntil time.Time // serving is allowed before this instant, on o.clock
	serveFrom  time.Time // the hold may not serve, nor be handed over, before this instant, on o.clock
	createOpen bool      // a renewal's create over an empty key whose outcome is unknown: it may land at any time
	term       uint64    // the revision at which the current hold began: the fencing token
	held       bool      // a write of ours made us the holder and no one else's followed
	handedOver bool      // Release wrote the released record: set with the move to released
	previous   Holder    // whom the lease was taken from, if it was not free
	// longest is the longest lease a live holder's record was seen to
	// advertise, or the store was found to keep (quarantine).
	longest time.Duration
	// refused is the store's refusal of its own settings (ErrInvalidConfig)
	// that the last renewal met, nil once one succeeds: the holder is
	// fenced while it lasts. refusedLog is when such a refusal was last
	// logged, and what it said.
	refused    error
	refusedLog struct {
		at  time.Time
		msg string
	}
	// keeping is true while the keeper runs, and answeredAt is when it
	// started or last heard the store answer a call, good or bad: a
	// renewal's, or one step of it (Stalled).
	keeping    bool
	answeredAt time.Time
	keepCancel context.CancelFunc
	keepDone   chan struct{}
	serving    chan struct{} // closed the first time the keeper serves
	lost       chan struct{} // closed when the lease is lost
}

// NewOwnership checks the timing and the holder and returns an idle Ownership.
func NewOwnership(lease Lease, me Holder, timing Timing, opts ...Option) (*Ownership, error) {
	if err := timing.Validate(); err != nil {
		return nil, err
	}
	if !ValidInstanceID(me.InstanceID) {
		return nil, fmt.Errorf("%w: instance id %q is not 32 lowercase hex characters", ErrInvalidConfig, me.InstanceID)
	}
	if err := ValidateRolloutID(me.RolloutID); err != nil {
		return nil, err
	}
	// The record says which lease the holder renews by, so a contender
	// configured for a shorter one waits for this one's.
	me.Lease = timing.Lease
	o := &Ownership{me: me, timing: timing, lost: make(chan struct{})}
	o.lease = answering{Lease: lease, o: o}
	for _, opt := range opts {
		opt(o)
	}
	if o.log == nil {
		o.log = slog.Default().With("instance", me.InstanceID)
	}
	if o.clock == nil {
		o.clock = goClock{}
	}
	return o, nil
}

// Me is the holder this engine writes.
func (o *Ownership) Me() Holder { return o.me }

// Timing is the timing the Ownership was built with.
func (o *Ownership) Timing() Timing { return o.timing }

// State is the current state.
func (o *Ownership) State() State {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.state
}

// Record is the lease as last seen or written by this engine.
func (o *Ownership) Record() Record {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.record
}

// SinceChange is how long ago, on the local clock, the engine last renewed
// the lease (while it holds it) or saw it change (while it waits for it).
func (o *Ownership) SinceChange() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case o.held:
		return o.clock.Now().Sub(o.validUntil.Add(-o.timing.Fence()))
	case !o.observedAt.IsZero():
		return time.Since(o.observedAt)
	}
	return 0
}

// MayServe reports whether the engine may accept a call now: it serves, and
// its last successful renewal started less than half a lease ago on the local
// clock. Checking the clock as well as the state means a process that was
// paused does not take a call before its fence timer has had a chance to run.
func (o *Ownership) MayServe() bool {
	_, ok := o.Term()
	return ok
}

// Term is the fencing token of the hold the engine serves under, the lease
// revision at which that hold began, and whether it may serve now, as
// MayServe says. A write that carries the token can be refused by a store
// that has seen a newer one.
func (o *Ownership) Term() (uint64, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.clock.Now()
	return o.term, o.state == StateServing && !now.Before(o.serveFrom) && now.Before(o.validUntil)
}

// HandedOver reports whether Release wrote the released record. It turns
// true in the same step as the move to released, so a caller that reads
// Term, then HandedOver, finds one of them open at every instant of a
// handover that was written; the observer hears of the move later.
func (o *Ownership) HandedOver() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.handedOver
}

// StalledAfter is how many leases a holder's keeper may go without hearing
// the store answer a call before Stalled says it is stuck.
const StalledAfter = 3

// Stalled reports whether the engine holds the lease and its keeper has
// heard the store answer no call, good or bad, for StalledAfter leases.
// Each call a renewal makes counts as it returns, not only the renewal's
// end: a renewal may make several (an update, a read, the longest lease's
// raise, a create, another read), each allowed LeaseCallOverrun past the
// renewal's cut-off, so a renewal that turns may take longer than
// StalledAfter short leases as a whole. A keeper that turns hears an
// answer at least every half lease and LeaseCallOverrun: the next renewal
// starts at most a quarter lease after the last answer, its calls are cut
// off a quarter lease after it starts, and each returns at most
// LeaseCallOverrun after its cut-off or its own start. That is under
// StalledAfter leases for every lease from MinLease on, which
// the constant below holds at compile time. So a holder that is
// fenced because the store is out of reach, or that waits out its hold of
// a key made anew, is not stalled; one whose keeper waits on a call that
// ignores that bound, or on an observer that blocks, is. It neither serves
// nor renews, and only a restart frees the lease for a standby sooner than
// its stop would. A standby, a client, and an engine that released or lost
// the lease are never stalled: they keep no lease.
func (o *Ownership) Stalled() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.keeping && o.clock.Now().Sub(o.answeredAt) >= StalledAfter*o.timing.Lease
}

// The package does not compile unless a keeper that turns, with the
// shortest lease, is heard within StalledAfter leases (see Stalled): a
// negative constant has no uint64 value.
const _ = uint64(StalledAfter*MinLease - MinLease/2 - LeaseCallOverrun - 1)

// heard notes that the store answered a call.
func (o *Ownership) heard() {
	now := o.clock.Now()
	o.mu.Lock()
	o.answeredAt = now
	o.mu.Unlock()
}

// answering is the store as the Ownership calls it: each call that returns,
// with an answer or an error, is heard (Stalled). Only a keeper's hearing
// counts; the rest of the calls note it for nothing.
type answering struct {
	Lease
	o *Ownership
}

func (a answering) Read(ctx context.Context) (Record, error) {
	defer a.o.heard()
	return a.Lease.Read(ctx)
}

func (a answering) Create(ctx context.Context, h Holder) (uint64, error) {
	defer a.o.heard()
	return a.Lease.Create(ctx, h)
}

func (a answering) Update(ctx context.Context, h Holder, rev uint64) (uint64, error) {
	defer a.o.heard()
	return a.Lease.Update(ctx, h, rev)
}

func (a answering) Advertise(ctx context.Context, d time.Duration) (time.Duration, error) {
	defer a.o.heard()
	return a.Lease.Advertise(ctx, d)
}

// Lost is closed when another engine takes the lease from this one; the
// process owner should then stop.
func (o *Ownership) Lost() <-chan struct{} { return o.lost }

// Claim decides, before any backend opens, how this engine starts:
//   - client: never touches the lease;
//   - a free lease is taken and the engine serves;
//   - a lease held by another release (serve role with a rollout id that
//     differs from the holder's) makes a standby;
//   - otherwise the holder is watched for up to one lease period: a renewal
//     means it is alive (ErrAlreadyServing, or the client outcome for auto),
//     silence means it is dead and the lease is taken over.
func (o *Ownership) Claim(ctx context.Context, role Role) (Outcome, error) {
	if role == RoleClient {
		return OutcomeClient, nil
	}
	rollout := ""
	if role == RoleServe {
		rollout = o.me.RolloutID // auto never stands by
	}
	rec, err := o.lease.Read(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the lease: %w", err)
	}
	observed := time.Now()
	for {
		o.seen(rec)
		if rec.Free() || o.ours(rec) || time.Since(observed) >= o.silence(rec) {
			ok, err := o.acquire(ctx, rec)
			if err != nil {
				return 0, err
			}
			if ok {
				return OutcomeServe, nil
			}
			next, err := o.lease.Read(ctx)
			if err != nil {
				return 0, fmt.Errorf("read the lease: %w", err)
			}
			if next.Revision == rec.Revision {
				// A replica behind the write that beat us: wait for it,
				// rather than spin on the same stale record.
				if err := o.pause(ctx); err != nil {
					return 0, err
				}
				continue
			}
			rec, observed = next, time.Now()
			continue
		}
		if rollout != "" && rec.Holder.RolloutID != rollout || o.hot && role == RoleServe {
			o.mu.Lock()
			o.record, o.observedAt = rec, observed
			o.mu.Unlock()
			o.transition(StateStandby, rec)
			return OutcomeStandby, nil
		}
		next, err := o.lease.WaitForChange(ctx, rec.Revision, o.silence(rec)-time.Since(observed))
		if err != nil {
			if rec.Holder.Command && ctx.Err() != nil {
				return 0, fmt.Errorf("%w: the engine of a command did not release the lease within the start: %w", &HeldError{Holder: rec.Holder}, err)
			}
			return 0, fmt.Errorf("watch the lease: %w", err)
		}
		if next.Revision == rec.Revision {
			continue
		}
		if next.Present && !next.Holder.Released && next.Holder.InstanceID == rec.Holder.InstanceID {
			if role == RoleAuto {
				return OutcomeClient, nil
			}
			if !next.Holder.Command {
				return 0, &HeldError{Holder: next.Holder}
			}
			// The engine of a command releases the lease as its command
			// returns, often a moment later: serve waits for that, or for
			// its silence, within the start's time.
			o.log.Info("the engine of a command holds the lease; waiting for it to release", "holder", next.Holder.String())
		}
		rec, observed = next, time.Now()
	}
}

// AwaitLease runs a standby until it serves. It takes the lease as soon as
// the holder releases it, or once the holder has been silent for a full lease
// period. It fails with ErrAlreadyServing if an engine of this release takes
// the lease first, and with ErrStandbyTimedOut after the standby timeout.
func (o *Ownership) AwaitLease(ctx context.Context) error {
	o.mu.Lock()
	if o.state != StateStandby {
		st := o.state
		o.mu.Unlock()
		return fmt.Errorf("await the lease: engine is %s, not standby", st)
	}
	rec, observed := o.record, o.observedAt
	o.mu.Unlock()
	deadline := observed.Add(o.timing.StandbyTimeout)
	for {
		o.seen(rec)
		if rec.Free() || o.ours(rec) || time.Since(observed) >= o.silence(rec) {
			ok, err := o.acquire(ctx, rec)
			switch {
			case ok:
				return nil
			case ctx.Err() != nil:
				return ctx.Err()
			case errors.Is(err, ErrLeaseLost):
				// Another engine took the lease while this one waited to
				// serve: lost is terminal.
				return err
			case errors.Is(err, ErrInvalidConfig):
				o.logRefusal("the lease store refuses its settings; the standby takes nothing until they are changed", err)
				if err := o.pause(ctx); err != nil {
					return err
				}
			case err != nil:
				o.log.Warn("lease takeover failed; reading it again", "err", err)
				if err := o.pause(ctx); err != nil {
					return err
				}
			}
			next, err := o.lease.Read(ctx)
			switch {
			case ctx.Err() != nil:
				return ctx.Err()
			case err != nil:
				o.log.Warn("lease read failed; standby keeps waiting", "err", err)
			case next.Revision != rec.Revision:
				rec, observed = next, time.Now()
				continue
			}
			// No news, or a replica behind: wait before trying again.
			if err := o.pause(ctx); err != nil {
				return err
			}
			continue
		}
		if rec.Holder.RolloutID == o.me.RolloutID && !o.hot {
			err := &HeldError{Holder: rec.Holder}
			o.transitionWhy(StateIdle, rec, err.Error())
			return err
		}
		now := time.Now()
		if o.hot {
			deadline = now.Add(o.silence(rec)) // a hot standby waits as long as the holder lives
		}
		if !now.Before(deadline) {
			err := fmt.Errorf("%w after %v; the lease is still held by %s", ErrStandbyTimedOut, o.timing.StandbyTimeout, rec.Holder)
			o.transitionWhy(StateIdle, rec, err.Error())
			return err
		}
		wait := min(o.silence(rec)-now.Sub(observed), deadline.Sub(now))
		next, err := o.lease.WaitForChange(ctx, rec.Revision, wait)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			o.log.Warn("lease watch failed; standby keeps waiting", "err", err)
			if err := o.pause(ctx); err != nil {
				return err
			}
			continue
		}
		if next.Revision != rec.Revision {
			rec, observed = next, time.Now()
			o.mu.Lock()
			o.record, o.observedAt = rec, observed
			o.mu.Unlock()
		}
	}
}

// silence is how long a contender waits without seeing a new revision of
// rec before it takes the holder for dead: a lease, its own or, when the
// holder's record says it renews by a longer one, that. Judged by its own
// lease alone, a contender configured for a shorter lease than the
// holder's (a deploy that shortens lease_seconds, a command run with the
// default configuration) took the lease between two renewals of a holder
// that still served.
func (o *Ownership) silence(rec Record) time.Duration {
	if !rec.Present {
		return o.timing.Lease
	}
	return max(o.timing.Lease, rec.Holder.advertised())
}

// seen notes the lease a live holder's record advertises: a key found
// with no value later is held at least that long (quarantine).
func (o *Ownership) seen(rec Record) {
	if !rec.Present || rec.Holder.Released {
		return
	}
	o.mu.Lock()
	o.longest = max(o.longest, rec.Holder.advertised())
	o.mu.Unlock()
}

// advertise raises the longest lease the store keeps beside the key to
// this engine's own, before a write that may make it the holder, and notes
// the longest the store keeps. An engine that later finds the key with no
// value, and never saw this one's record, holds it that long: judged by
// its own shorter lease, it served beside this engine, which serves on
// until half its own lease after its last renewal.
func (o *Ownership) advertise(ctx context.Context) error {
	longest, err := o.lease.Advertise(ctx, o.timing.Lease)
	if err != nil {
		return fmt.Errorf("advertise the lease: %w", err)
	}
	o.mu.Lock()
	o.longest = max(o.longest, min(longest, MaxLease))
	o.mu.Unlock()
	return nil
}

// quarantine is how long a write over a key with no value is held before
// it serves: Timing.Quarantine, or the longest lease a holder was seen to
// renew by or the store keeps, which outlasts that holder's fence as a
// lease of our own outlasts one like ours.
func (o *Ownership) quarantine() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	return max(o.timing.Quarantine(), o.longest)
}

// pause waits a renewal period before a standby retries a failed store call.
func (o *Ownership) pause(ctx context.Context) error {
	t := time.NewTimer(o.timing.Renew())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// acquire takes rec, which is free or has been silent for a lease period, by
// a create or a compare-and-swap on its revision. It returns false, nil when
// another write came first. On success it starts the keeper and returns once
// the engine serves; it fails with ErrLeaseLost when another engine takes
// the lease before that.
func (o *Ownership) acquire(ctx context.Context, rec Record) (bool, error) {
	// Before the write, so whoever finds the key with no value later knows
	// this engine's lease, and after the read that found rec, so the
	// longest the store keeps covers whoever held a key found with none.
	if err := o.advertise(ctx); err != nil {
		return false, fmt.Errorf("take the lease: %w", err)
	}
	start := o.clock.Now()
	serveFrom := start
	// renewedAt is when the write of our record began, which the lease is
	// counted from.
	renewedAt := start
	// A key with no value says nothing of who served last: it was deleted,
	// purged, or its bucket made anew, and a holder that renewed just
	// before may serve on until half a lease after its last renewal. Our
	// own write whose reply was lost, seen later, says as little: what it
	// wrote over is unknown. Either is held the quarantine before
	// serving: a lease, or the longest lease the store keeps or a record
	// was seen to renew by.
	quarantine := o.ours(rec) || !rec.Present
	me := o.written(quarantine)
	var rev uint64
	var err error
	if rec.Present {
		rev, err = o.lease.Update(ctx, me, rec.Revision)
	} else {
		rev, err = o.lease.Create(ctx, me)
	}
	if errors.Is(err, ErrLeaseTaken) || errors.Is(err, ErrLeaseConflict) {
		return false, nil
	}
	if err != nil {
		// The reply may be lost while the write went through: a record of
		// ours at a newer revision is that write. The read-back runs on
		// even when ctx has ended, as a signal ends a claim: a write that
		// landed is a hold, which Release must then hand over rather than
		// leave to a process that is gone.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.timing.Renew())
		cur, rerr := o.lease.Read(rctx)
		cancel()
		if rerr != nil || !o.ours(cur) || cur.Revision <= rec.Revision {
			return false, fmt.Errorf("take the lease: %w", err)
		}
		o.log.Info("took the lease; the reply to the write was lost", "revision", cur.Revision)
		rev = cur.Revision
		// The record may be the write of an earlier attempt whose reply
		// was lost too, and which landed long before this one began: a
		// contender that saw it land counts its lease of silence from
		// then. When it landed is unknown, so it counts for nothing: the
		// engine serves once a renewal of its own has landed, which a
		// contender that saw the record has not yet taken over.
		renewedAt = start.Add(-o.timing.Fence())
	}
	if quarantine {
		// Counted from now, when the write is known to have landed: the
		// last renewal of whoever served before started before it landed.
		// Counted from before the write, a write that landed late (a
		// stalled link, a paused process, a compaction of the stream that
		// emptied the key again) would find its quarantine already over.
		serveFrom = o.clock.Now().Add(o.quarantine())
	}
	switch {
	case rec.Deleted():
		o.log.Warn("the lease key was deleted by someone else; holding it a lease before serving",
			"revision", rec.Revision, "serve_in", serveFrom.Sub(o.clock.Now()))
	case !rec.Present:
		// A new account, as a rule; a purged stream or a bucket made anew
		// look the same, hence the wait.
		o.log.Info("the lease key has no history; holding it a lease before serving", "serve_in", serveFrom.Sub(o.clock.Now()))
	case !rec.Free():
		o.log.Info("took over the lease from a silent holder", "from", rec.Holder.String())
	}

	kctx, cancel := context.WithCancel(context.Background())
	o.mu.Lock()
	o.previous = Holder{}
	if rec.Present && !o.ours(rec) {
		o.previous = rec.Holder // a silent holder, or one that released
	}
	o.record = Record{Holder: me, Revision: rev, Present: true}
	o.term = rev
	o.serveFrom = serveFrom
	o.held = true
	o.keepCancel, o.keepDone = cancel, make(chan struct{})
	o.keeping, o.answeredAt = true, start
	o.serving = make(chan struct{})
	serving, done := o.serving, o.keepDone
	o.mu.Unlock()
	go o.keep(kctx, renewedAt, serveFrom)

	select {
	case <-serving:
		return true, nil
	case <-done:
		return false, fmt.Errorf("take the lease: %w", ErrLeaseLost)
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// written is the holder this engine writes: itself, renewing by its own
// lease, or, while it holds a key in its quarantine, by the quarantine. A
// hold left to go silent in its quarantine (its engine stopped, or died)
// is then taken over only once a successor has seen it silent that long,
// by when whoever served before the key went has fenced, though the
// successor may never have seen that holder's longer lease.
func (o *Ownership) written(quarantined bool) Holder {
	h := o.me
	if quarantined {
		h.Lease = o.quarantine()
	}
	return h
}

// ours reports whether rec is this engine's live record.
func (o *Ownership) ours(rec Record) bool {
	return rec.Present && rec.Holder.InstanceID == o.me.InstanceID && !rec.Holder.Released
}

type renewal struct {
	start time.Time
	rev   uint64
	err   error // nil: renewed; ErrLeaseLost: another engine holds it; else unknown
	// recreatedAt is set when the key held no value and a create of ours
	// made it again: when our record was known to be in it (the create's
	// answer, or the read that found a create of unknown outcome).
	recreatedAt time.Time
	// holder is the record the renewal found another engine's, when it
	// found the lease lost.
	holder Record
}

// keep renews the lease every quarter lease (an eighth after a failure) and
// decides, from the local clock alone, whether the engine serves or is
// fenced. It runs until the lease is lost or ctx ends. Every instant it keeps
// is on o.clock; its timers wait for differences between them.
func (o *Ownership) keep(ctx context.Context, renewedAt, serveFrom time.Time) {
	defer close(o.keepDone)
	defer func() {
		o.mu.Lock()
		o.keeping = false
		o.mu.Unlock()
	}()
	results := make(chan renewal, 1)
	inFlight := false
	next := renewedAt.Add(o.timing.Renew())
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		now := o.clock.Now()
		o.settle(now, renewedAt, serveFrom)
		wake := next
		if inFlight {
			wake = now.Add(o.timing.Lease) // the result wakes us
		}
		if fence := renewedAt.Add(o.timing.Fence()); fence.After(now) && fence.Before(wake) {
			wake = fence
		}
		if serveFrom.After(now) && serveFrom.Before(wake) {
			wake = serveFrom
		}
		timer.Reset(wake.Sub(now))

		select {
		case <-ctx.Done():
			if inFlight {
				// The renewal in flight may have learnt that the lease is
				// lost, or made the key anew: Release must know before it
				// decides whether to write.
				o.take(<-results, &renewedAt, &serveFrom)
			}
			return
		case <-timer.C:
			if !inFlight && !o.clock.Now().Before(next) {
				start := o.clock.Now()
				inFlight, next = true, start.Add(o.timing.Renew())
				rev := o.Record().Revision
				go func() {
					rctx, cancel := context.WithTimeout(ctx, o.timing.Renew())
					defer cancel()
					r := o.renew(rctx, rev)
					r.start = start
					results <- r
				}()
			}
		case r := <-results:
			inFlight = false
			o.mu.Lock()
			o.answeredAt = o.clock.Now()
			o.mu.Unlock()
			if o.renewed != nil {
				o.renewed(r.err == nil, o.clock.Now().Sub(r.start))
			}
			if !o.take(r, &renewedAt, &serveFrom) {
				return
			}
			if r.err != nil {
				// Retry sooner than the regular period, so one failed call
				// leaves a second chance before the fence.
				next = r.start.Add(o.timing.Renew() / 2)
			}
		}
	}
}

// take applies a renewal's result to the hold, and reports false when the
// renewal found the lease lost, which ends the hold.
func (o *Ownership) take(r renewal, renewedAt, serveFrom *time.Time) bool {
	if errors.Is(r.err, ErrLeaseLost) {
		if r.holder.Present {
			o.mu.Lock()
			o.record = r.holder // so the loss names who holds the lease
			o.mu.Unlock()
		}
		o.loseLease()
		return false
	}
	if errors.Is(r.err, ErrInvalidConfig) {
		// The key held no value and the store refused to make it anew, as
		// Open refuses such settings at start: a bucket made anew, or
		// edited, with a setting the lease cannot run on. Nothing will
		// renew until an operator changes it, so the holder fences now, as
		// it does on finding the key deleted, rather than half a lease
		// after its last renewal under a reason that blames the link to
		// the store. It keeps trying, so the fix alone brings it back.
		o.mu.Lock()
		o.refused = r.err
		o.mu.Unlock()
		o.logRefusal("the lease store refuses its settings; the engine is fenced until they are changed", r.err)
		return true
	}
	if r.err != nil {
		o.log.Warn("lease renewal failed", "err", r.err)
		return true
	}
	o.mu.Lock()
	o.refused = nil
	o.mu.Unlock()
	if !r.recreatedAt.IsZero() {
		// Someone deleted the key: another engine may have taken the lease
		// before that and serve still. It stops within half a lease of its
		// last renewal, which started before our create landed, so this
		// engine holds the key Timing.Quarantine from when it knew that
		// create landed, and serves under a new term.
		*serveFrom = r.recreatedAt.Add(o.quarantine())
		o.mu.Lock()
		o.term = r.rev
		o.serveFrom = *serveFrom
		o.mu.Unlock()
		o.log.Warn("the lease key was deleted by someone else; created it again, holding it a lease before serving",
			"serve_in", serveFrom.Sub(o.clock.Now()))
	}
	*renewedAt = r.start
	o.mu.Lock()
	o.record = Record{Holder: o.me, Revision: r.rev, Present: true}
	o.mu.Unlock()
	return true
}

// settle moves between serving and fenced by the clock: the engine serves
// from serveFrom on, while its last successful renewal started less than half
// a lease ago.
func (o *Ownership) settle(now, renewedAt, serveFrom time.Time) {
	validUntil := renewedAt.Add(o.timing.Fence())
	valid := now.Before(validUntil)
	o.mu.Lock()
	o.validUntil = validUntil
	from, rec, term := o.state, o.record, o.term
	var to State
	var reason string // why it fences: renewals failing, a key made anew and a refused setting call for different remedies
	switch {
	case o.refused != nil && from == StateServing:
		to = StateFenced
		reason = "the lease key is gone and the lease store refuses to make it anew: " + o.refused.Error()
	case o.refused != nil:
		to = from
	case now.Before(serveFrom) && from == StateServing:
		to = StateFenced
		reason = fmt.Sprintf("the lease key was deleted by someone else and made anew; it is held %v before the engine serves again",
			serveFrom.Sub(now))
	case now.Before(serveFrom):
		to = from
	case valid:
		to = StateServing
	case from == StateServing:
		to = StateFenced
		reason = fmt.Sprintf("no renewal succeeded for half a lease; the last good one began %v ago", now.Sub(renewedAt))
	default:
		to = from
	}
	// The state changes under the lock, before Claim or AwaitLease learn
	// that the engine serves, so MayServe holds as soon as they return; the
	// observer hears of it just after.
	var previous Holder
	if to != from {
		o.state = to
		if to == StateServing && (from == StateIdle || from == StateStandby) {
			previous = o.previous
		}
	}
	if to == StateServing && o.serving != nil {
		select {
		case <-o.serving:
		default:
			close(o.serving)
		}
	}
	o.mu.Unlock()
	if to != from {
		o.announce(Transition{From: from, To: to, Record: rec, Previous: previous, Term: term, Reason: reason})
	}
}

// renew writes our holder again at rev. A conflict is read out: our own
// record at another revision is a renewal whose reply was lost, so we write
// at that revision; a key with no value is created again; anyone else's
// record means the lease is lost. A key made again is held from when our
// record is known to be in it (recreatedAt). The result's start is the
// caller's to set.
func (o *Ownership) renew(ctx context.Context, rev uint64) renewal {
	o.mu.Lock()
	quarantined := o.createOpen || o.clock.Now().Before(o.serveFrom)
	o.mu.Unlock()
	newRev, err := o.lease.Update(ctx, o.written(quarantined), rev)
	if err == nil {
		// The key held our record at rev: no create of ours landed since,
		// and none still on its way can land on a key with a value.
		o.setCreateOpen(false)
	}
	if !errors.Is(err, ErrLeaseConflict) {
		return renewal{rev: newRev, err: err}
	}
	rec, err := o.lease.Read(ctx)
	if err != nil {
		return renewal{err: err}
	}
	read := o.clock.Now()
	switch {
	case !rec.Present:
		// After the read that found the key empty: the longest lease the
		// store keeps then covers whoever took it before it went.
		if err := o.advertise(ctx); err != nil {
			return renewal{err: err}
		}
		newRev, err = o.lease.Create(ctx, o.written(true))
		if err == nil {
			o.setCreateOpen(false)
			return renewal{rev: newRev, recreatedAt: o.clock.Now()}
		}
		// The create may have landed though it failed, even though it
		// said the key was taken (its write landed and a follow-up did
		// not, or it read a replica behind the delete), and it may land
		// later still: until a read finds the key, the doubt stays open.
		o.setCreateOpen(true)
		if !errors.Is(err, ErrLeaseTaken) {
			return renewal{err: err}
		}
		cur, rerr := o.lease.Read(ctx)
		switch {
		case rerr != nil:
			return renewal{err: rerr}
		case o.ours(cur):
			o.setCreateOpen(false)
			return renewal{rev: cur.Revision, recreatedAt: o.clock.Now()}
		case cur.Present:
			return renewal{err: ErrLeaseLost, holder: cur}
		default:
			return renewal{err: err}
		}
	case o.ours(rec):
		o.mu.Lock()
		doubt := o.createOpen
		o.mu.Unlock()
		newRev, err = o.lease.Update(ctx, o.written(quarantined), rec.Revision)
		if err != nil {
			return renewal{rev: newRev, err: err}
		}
		if !doubt {
			return renewal{rev: newRev}
		}
		// Our create of unknown outcome: it landed at some time before
		// the read that found it, which is all that is known, so the key
		// is held from that read. From when the key was seen empty, a
		// create that landed late, after another engine made the key,
		// served and lost it to a second delete, would be served at once.
		o.setCreateOpen(false)
		return renewal{rev: newRev, recreatedAt: read}
	default:
		return renewal{err: ErrLeaseLost, holder: rec}
	}
}

func (o *Ownership) setCreateOpen(open bool) {
	o.mu.Lock()
	o.createOpen = open
	o.mu.Unlock()
}

// logRefusal logs, as an error, a refusal of the store's settings: when it
// first comes or says something new, and then once a lease while it lasts,
// rather than at every try, an eighth of a lease apart.
func (o *Ownership) logRefusal(msg string, err error) {
	now := o.clock.Now()
	o.mu.Lock()
	last := o.refusedLog
	due := last.msg != err.Error() || now.Sub(last.at) >= o.timing.Lease
	if due {
		o.refusedLog.at, o.refusedLog.msg = now, err.Error()
	}
	o.mu.Unlock()
	if due {
		o.log.Error(msg, "err", err)
	}
}

// loseLease moves to lost, once: lost is terminal.
func (o *Ownership) loseLease() {
	o.lostOne.Do(func() {
		o.mu.Lock()
		o.held = false
		rec := o.record
		o.mu.Unlock()
		o.log.Error("lease lost to another engine", "holder", rec.Holder.String())
		close(o.lost) // before the observers hear of it, so Lost is closed for them
		o.transitionWhy(StateLost, rec, "the lease is held by "+rec.Holder.String())
	})
}

// Release stops renewing and gives the lease up, so a standby takes it at
// once: it writes a released record at our revision, cut off after a renewal
// period. Until that write is answered the engine keeps its state, so
// MayServe goes on judging it by the clock; the move to released then says
// whether the record was written (Transition.HandedOver). Call it after
// Claim and AwaitLease have returned. A lease that is no longer ours is not
// an error.
func (o *Ownership) Release(ctx context.Context) error {
	o.mu.Lock()
	cancel, done := o.keepCancel, o.keepDone
	o.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	o.mu.Lock()
	from, rec, held, serveFrom, createOpen := o.state, o.record, o.held, o.serveFrom, o.createOpen
	if from == StateLost || from == StateReleased {
		o.mu.Unlock()
		return nil
	}
	o.held = false
	o.mu.Unlock()
	// A hold still waiting out its quarantine over a key that had no value
	// (taken so, or made again by a renewal, answered or not) must not be
	// handed over: whoever served before the key went may serve on, and a
	// released record would let a standby take it at once. The record is
	// left to go silent instead.
	// So must one whose renewal made the key anew and never learnt the
	// outcome: the create may land at any time, and a record of ours that
	// Release found would be that key, whose quarantine has not begun.
	// A hold that has not served yet for another reason (its takeover was
	// answered after its fence and no renewal has succeeded since) is
	// handed over like any other: the record is ours, and left to go
	// silent it would hold the next engine up for a whole lease.
	waiting := held && (createOpen || o.clock.Now().Before(serveFrom))
	if !held || waiting {
		o.transition(StateReleased, rec)
		return nil
	}
	written, err := o.writeReleased(ctx, rec)
	o.mu.Lock()
	from = o.state
	o.state, o.handedOver = StateReleased, written
	o.mu.Unlock()
	o.announce(Transition{From: from, To: StateReleased, Record: rec, HandedOver: written})
	if err != nil {
		return fmt.Errorf("release the lease (it frees itself after %v): %w", o.timing.Lease, err)
	}
	if written {
		o.log.Info("lease released")
	}
	return nil
}

// writeReleased writes the released record over rec, our last, and reports
// whether it did. It takes at most a renewal period: the writes three
// quarters of it, and a read-back, when a write's answer was lost, the rest.
// A write that fails for any reason but a conflict (no responders while the
// stream elects a leader, a connection that is reconnecting) is tried again
// within those three quarters, a sixteenth of a renewal period apart: left
// unwritten, the record would hold the successor up for a whole lease. Every
// try is a compare-and-swap on a revision the key was last known to hold our
// live record at, and a conflict is read out before the next, so none
// writes over another engine's record, and one that finds our released
// record has its answer: an earlier try landed.
func (o *Ownership) writeReleased(ctx context.Context, rec Record) (bool, error) {
	deadline := o.clock.Now().Add(o.timing.Renew())
	rctx, cancel := context.WithTimeout(ctx, o.timing.Renew()*3/4)
	defer cancel()
	released := o.me
	released.Released = true
	rev := rec.Revision
	var err error
	for {
		_, err = o.lease.Update(rctx, released, rev)
		if err == nil {
			return true, nil
		}
		if errors.Is(err, ErrLeaseConflict) {
			// A renewal whose reply was lost moved the revision, and it is
			// still ours; or an earlier try landed unanswered; or another
			// engine holds the key.
			cur, rerr := o.lease.Read(rctx)
			switch {
			case rerr != nil:
				err = rerr
			case o.ours(cur) && cur.Revision > rev:
				rev = cur.Revision
				continue
			case o.ours(cur):
				// A read behind the write that conflicted: it is waited
				// for like any failure, rather than tried again at once.
			case o.isReleasedByMe(cur, rec.Revision):
				return true, nil
			default:
				return false, nil
			}
		}
		if !o.pauseRelease(rctx) {
			break
		}
	}
	if o.releasedByMe(ctx, rec.Revision, deadline) {
		// The write landed and its answer was lost: the lease is handed
		// over as surely as if the answer had come.
		return true, nil
	}
	return false, err
}

// pauseRelease waits a sixteenth of a renewal period before a release's
// next try, and reports false when ctx, the release's bound for its
// writes, ends first.
func (o *Ownership) pauseRelease(ctx context.Context) bool {
	t := time.NewTimer(o.timing.Renew() / 16)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return ctx.Err() == nil
	}
}

// releasedByMe reads, by deadline, whether the key holds this engine's
// released record past revision after: only its own Release writes one. A
// successor that took the key first hides it, and the answer is no.
func (o *Ownership) releasedByMe(ctx context.Context, after uint64, deadline time.Time) bool {
	rctx, cancel := context.WithTimeout(ctx, deadline.Sub(o.clock.Now()))
	defer cancel()
	cur, err := o.lease.Read(rctx)
	return err == nil && o.isReleasedByMe(cur, after)
}

// isReleasedByMe reports whether cur is this engine's released record past
// revision after.
func (o *Ownership) isReleasedByMe(cur Record, after uint64) bool {
	return cur.Present && cur.Revision > after && cur.Holder.Released && cur.Holder.InstanceID == o.me.InstanceID
}

func (o *Ownership) transition(to State, rec Record) { o.transitionWhy(to, rec, "") }

func (o *Ownership) transitionWhy(to State, rec Record, reason string) {
	o.mu.Lock()
	from := o.state
	o.state = to
	o.mu.Unlock()
	if from != to {
		o.announce(Transition{From: from, To: to, Record: rec, Reason: reason})
	}
}

// announce logs a transition and reports it to the observer.
func (o *Ownership) announce(tr Transition) {
	attrs := []any{"revision", tr.Record.Revision}
	if tr.Reason != "" {
		attrs = append(attrs, "reason", tr.Reason)
	}
	o.log.Info("ownership "+tr.From.String()+" -> "+tr.To.String(), attrs...)
	if o.observe != nil {
		o.observe(tr)
	}
}
