package app

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/abi-engine/engine/domain"
)

// servingKernel is what the serving loop turns on and off: the kernel
// services' subscriptions and the sessions they open.
type servingKernel interface {
	// serve subscribes; it does nothing when already subscribed.
	serve() error
	// fence stops admitting calls and cancels those running, and the
	// sessions, at once; the wait it returns ends, bounded, what needs
	// the broker.
	fence() (wait func())
}

// raiseHold is what a term tells its stores as it begins (ADR 0023): one
// taken from a holder that released the lease holds the raise of their
// fence for bound, the predecessor's drain and a margin, so that its
// transfers finish; any other holds it not at all.
type raiseHold struct {
	stores interface {
		holdRaise(token uint64, until time.Time, clock domain.Clock)
	}
	bound time.Duration
}

// handoverHold is the hold of the stores l after a release, for the drain
// and one lease of t: the predecessor drains for drain_seconds from when
// its release returns, within half a lease of the successor seeing it
// released, and a write of it may still be on its way when its drain
// ends.
func handoverHold(l *local, t domain.Timing) raiseHold {
	return raiseHold{stores: l, bound: t.Drain + t.Lease}
}

// servingJobs are the jobs that run only while the engine serves.
type servingJobs interface {
	Start()
	// Cancel stops them and cancels their runs without waiting for them.
	Cancel()
	// Stop is Cancel, then waits for every run to return.
	Stop()
}

// serving is the one goroutine that decides what the engine does about its
// lease. Everything that bears on it (the lease's transitions, the kernel
// being built, a shutdown) is an event sent to it, and after each event it
// brings the kernel and the jobs in line with its state, in a fixed order:
//
//  1. if the engine may not serve: fence the kernel first, then cancel the
//     jobs' runs (without waiting for them), and only then wait, bounded,
//     for the broker to confirm the fence;
//  2. if it may serve, is booted and not shutting down: subscribe the
//     kernel, then start jobs;
//  3. while shutting down, jobs stay stopped, and shutdownJobs waits for
//     their runs, those a fence cancelled too, outside the loop, which
//     goes on acting on the lease meanwhile: a fence in that wait stops
//     the kernel, and a restore subscribes it again. Once that wait is
//     over (sealed), nothing subscribes the kernel again; it keeps
//     answering until the release (and after it, if the release was
//     written, for the drain), and Stop drains it.
//
// Serving is a level, not an edge: a fence that arrives before the kernel
// exists is state, so a kernel built later is never subscribed while the
// lease says no.
type serving struct {
	log  *slog.Logger
	jobs servingJobs
	// clock is the lease's (domain.WithClock), which counts a suspend: a
	// hold of the stores' raise is counted on it, so that a suspend of
	// this host does not stretch the hold past the predecessor's drain.
	clock   domain.Clock
	lost    func() // the lease was lost and the engine is not stopping
	failed  func(error)
	observe func(domain.Transition)

	mu     sync.RWMutex // held to send; close takes it to close events
	closed bool
	events chan servingEvent
	done   chan struct{}

	// handedOver is set when the release was written: from then on the
	// engine answers what reaches it until drained, next to its successor.
	// Admission reads the lease's own flag instead (term.HandedOver), which
	// turns with its state: this one is set when the release is announced,
	// a moment later.
	handedOver atomic.Bool

	// The loop's own state.
	lease    domain.State
	kernel   servingKernel
	shutdown bool
	// sealed: the stop has done with the jobs and goes on to the release
	// and the drain, so nothing subscribes the kernel again.
	sealed     bool
	subscribed bool
	// hold is the stores to tell, once booted; begun is the term the
	// engine began to serve, and when, until they are told; told is the
	// last term they were told of, and the end of its hold.
	hold  raiseHold
	begun *begunTerm
	told  struct {
		token uint64
		until time.Time
	}
}

// begunTerm is a term the engine began to serve, at the loop's clock when
// it heard of it; released when it was taken from a holder that released
// the lease; anew when it is the term of a lease key this engine made
// again after someone deleted it, while it served the term told before.
type begunTerm struct {
	token    uint64
	at       time.Time
	released bool
	anew     bool
}

// servingEvent is one thing the loop hears of. Exactly one field is set.
type servingEvent struct {
	transition *domain.Transition
	booted     servingKernel
	hold       raiseHold       // with booted
	ack        chan<- struct{} // closed once the loop has acted on the event
	shutdown   bool
	sealed     bool
}

func newServing(log *slog.Logger, jobs servingJobs, clock domain.Clock, lost func(), failed func(error), observe func(domain.Transition)) *serving {
	s := &serving{
		log: log, jobs: jobs, clock: clock, lost: lost, failed: failed, observe: observe,
		events: make(chan servingEvent, 64),
		done:   make(chan struct{}),
	}
	go s.run()
	return s
}

// transition hands the loop a move of the lease; it is the ownership's
// observer, called in order on the goroutine that made the move.
func (s *serving) transition(tr domain.Transition) {
	if tr.To == domain.StateReleased && tr.HandedOver {
		s.handedOver.Store(true)
	}
	s.send(servingEvent{transition: &tr})
}

// booted hands the loop the kernel, built and not subscribed, and the
// stores to tell of the term it begins to serve, and returns once
// the loop has acted on it: a serving engine then answers, so it is ready
// when it says so.
func (s *serving) booted(k servingKernel, hold raiseHold) {
	s.await(servingEvent{booted: k, hold: hold})
}

// shutdownJobs tells the loop the engine stops, and returns once jobs have
// stopped and nothing will subscribe the kernel again. The kernel keeps
// answering until the release. The runs are waited for here, not in the
// loop: a run that does not heed its cancellation holds the stop for up to
// a lease, and a fence or a loss in that time must still stop the kernel
// at once, and a restore subscribe it again, since the engine holds the
// lease, and no standby may take over, until the stop releases it.
func (s *serving) shutdownJobs() {
	s.await(servingEvent{shutdown: true})
	s.jobs.Stop()
	s.await(servingEvent{sealed: true})
}

// await sends ev and waits until the loop has acted on it.
func (s *serving) await(ev servingEvent) {
	ack := make(chan struct{})
	ev.ack = ack
	if s.send(ev) {
		<-ack
	}
}

// send hands the loop an event, and reports whether the loop still runs.
func (s *serving) send(ev servingEvent) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return false
	}
	s.events <- ev
	return true
}

// close ends the loop once it has handled every event sent before.
func (s *serving) close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.events)
	}
	s.mu.Unlock()
	<-s.done
}

// HandedOver reports whether the release was written.
func (s *serving) HandedOver() bool { return s.handedOver.Load() }

// term is the lease as admission reads it: the fencing token of the hold,
// and whether the engine may serve now, judged on its own clock; and
// whether its release was written, which turns in the same step as the
// lease's state (domain.Ownership).
type term interface {
	Term() (uint64, bool)
	HandedOver() bool
}

// admit is the one answer to "may this engine take a call now, and under
// which fencing token?": while it holds the lease, what the lease's clock
// says; once its release is written, yes, under its last token, until it
// is drained. Nothing else (a shutdown begun, a flag set early) opens it.
func (s *serving) admit(lease term) (uint64, bool) {
	token, ok := lease.Term()
	return token, ok || lease.HandedOver()
}

func (s *serving) run() {
	defer close(s.done)
	for ev := range s.events {
		switch {
		case ev.transition != nil:
			s.lease = ev.transition.To
			// A term begins at the first move to serving, the one that
			// carries Previous. A restore after a fence is of the same
			// term, unless the engine made the lease key again after
			// someone deleted it, which gives it a new one.
			if tr := ev.transition; tr.To == domain.StateServing {
				switch {
				case tr.From == domain.StateIdle || tr.From == domain.StateStandby:
					s.begun = &begunTerm{token: tr.Term, at: s.clock.Now(), released: tr.Previous.Released}
				case s.begun != nil:
					s.begun.token = tr.Term // not told yet: told of the term as it is
				case tr.Term != s.told.token:
					s.begun = &begunTerm{token: tr.Term, anew: true}
				}
			}
		case ev.booted != nil:
			s.kernel, s.hold = ev.booted, ev.hold
		case ev.shutdown:
			s.shutdown = true
		case ev.sealed:
			s.sealed = true
		}
		// Observers hear of a move to serving before the engine answers,
		// and of every other move once it has stopped: what they know of
		// the engine errs on the side of it answering.
		enables := ev.transition != nil && ev.transition.To == domain.StateServing
		if enables {
			s.observe(*ev.transition)
		}
		s.holdRaise()
		s.reconcile()
		if ev.transition != nil && !enables {
			s.observe(*ev.transition)
		}
		if ev.transition != nil && ev.transition.To == domain.StateLost && !s.shutdown {
			s.lost()
		}
		if ev.ack != nil {
			close(ev.ack)
		}
	}
}

// holdRaise tells the stores, once both are known, of the term the
// engine began to serve, before the kernel serves a call of it. The
// stores of an engine that serves at once open after the take; a
// standby's, before it. A term taken from a holder that released the
// lease holds their raise for the bound. Any other (taken after a lease
// of silence, or free) holds it until the take, which has passed, so the
// stores raise their fence to it at once, whether the term writes to
// them or not: else a term that never wrote would leave the fence at an
// older term, and its successor's held writes, conditioned on the fence
// as it stands, would let an engine older than it, paused, land its
// writes through that hold. The term of a lease key made anew keeps the
// hold of the term before it, whose predecessor may still drain: raised at
// once, the fence would refuse that drain's writes; not raised, an engine
// older than both would stay unfenced past the hold.
func (s *serving) holdRaise() {
	if s.begun == nil || s.hold.stores == nil {
		return
	}
	until := s.begun.at
	switch {
	case s.begun.anew:
		until = s.told.until
	case s.begun.released:
		until = until.Add(s.hold.bound)
	}
	s.hold.stores.holdRaise(s.begun.token, until, s.clock)
	s.told.token, s.told.until = s.begun.token, until
	s.begun = nil
}

// reconcile brings the kernel and the jobs in line with the state. Each
// step does nothing when the world already matches it.
func (s *serving) reconcile() {
	may := s.lease == domain.StateServing || s.lease == domain.StateReleased && s.handedOver.Load()
	if !may {
		wait := func() {}
		if s.subscribed {
			wait = s.kernel.fence()
			s.subscribed = false
		}
		// Before the wait on the broker: a job's writes are not fenced in
		// every store. Cancelled, not waited for: a run that does not heed
		// its context would hold up the loop, and with it the restore
		// after a renewal, while the engine holds the lease and says it
		// is ready. The job started again waits for that run to end.
		s.jobs.Cancel()
		wait()
		return
	}
	if s.lease == domain.StateServing && !s.sealed && s.kernel != nil && !s.subscribed {
		// Also while the stop waits for the jobs' runs: the engine holds
		// the lease until the stop releases it, and answers by its clock.
		if err := s.kernel.serve(); err != nil {
			s.kernel.fence()()
			if s.shutdown {
				// The engine stops already; its release comes next.
				s.log.Warn("cannot serve the kernel services again while stopping", "err", err)
			} else {
				s.failed(err)
			}
			// The engine stops; nothing is tried again.
			s.shutdown, s.sealed = true, true
			return
		}
		s.subscribed = true
	}
	if s.shutdown || s.lease != domain.StateServing {
		// Cancelled, not waited for, as at a fence: shutdownJobs waits for
		// the runs, this one's and those a fence cancelled, before the stop
		// closes the stores and stops the modules.
		s.jobs.Cancel()
		return
	}
	if s.kernel == nil {
		return
	}
	s.jobs.Start()
}
