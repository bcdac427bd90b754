package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/abi-engine/engine/domain"
)

// steps records, in order, what the serving loop did to the kernel and the
// jobs.
type steps struct {
	mu  sync.Mutex
	log []string
}

func (s *steps) add(step string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, step)
}

func (s *steps) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.log, ", ")
}

type fakeKernel struct {
	steps      *steps
	failServe  error
	subscribed bool
}

func (k *fakeKernel) serve() error {
	if k.failServe != nil {
		return k.failServe
	}
	if !k.subscribed {
		k.steps.add("subscribe")
	}
	k.subscribed = true
	return nil
}

func (k *fakeKernel) fence() func() {
	k.steps.add("fence")
	k.subscribed = false
	return func() { k.steps.add("fence confirmed") }
}

type fakeJobs struct {
	steps   *steps
	running bool
}

func (j *fakeJobs) Start() {
	if !j.running {
		j.steps.add("jobs start")
	}
	j.running = true
}

func (j *fakeJobs) Stop() {
	if j.running {
		j.steps.add("jobs stop")
	}
	j.running = false
}

func (j *fakeJobs) Cancel() { j.Stop() }

type loopHarness struct {
	*serving
	clock  *suspendingClock
	steps  *steps
	kernel *fakeKernel
	jobs   *fakeJobs
	lost   int
	failed []error
	heard  []domain.State
}

func newLoop(t *testing.T) *loopHarness {
	h := &loopHarness{steps: &steps{}, clock: &suspendingClock{}}
	h.kernel = &fakeKernel{steps: h.steps}
	h.jobs = &fakeJobs{steps: h.steps}
	h.serving = newServing(slog.New(slog.DiscardHandler), h.jobs, h.clock,
		func() { h.lost++ },
		func(err error) { h.failed = append(h.failed, err) },
		func(tr domain.Transition) {
			h.heard = append(h.heard, tr.To)
			h.steps.add("heard " + tr.To.String())
		})
	t.Cleanup(h.close)
	return h
}

func (h *loopHarness) move(to domain.State) {
	h.transition(domain.Transition{To: to})
	synctest.Wait()
}

func (h *loopHarness) boot() {
	h.booted(h.kernel, raiseHold{})
	synctest.Wait()
}

func (h *loopHarness) want(t *testing.T, subscribed, jobs bool) {
	t.Helper()
	if h.kernel.subscribed != subscribed || h.jobs.running != jobs {
		t.Fatalf("kernel subscribed %v, jobs running %v; want %v, %v (steps: %s)",
			h.kernel.subscribed, h.jobs.running, subscribed, jobs, h.steps)
	}
}

// A fence that arrives while the backends are still opening is state: the
// kernel built afterwards is not subscribed and no job starts until the
// lease is good again. Before, the fence was applied to nothing and the
// engine went on to serve next to its successor.
func TestAFenceWhileBootingKeepsTheKernelDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newLoop(t)
		h.move(domain.StateServing)
		h.move(domain.StateFenced)
		h.boot()
		h.want(t, false, false)
		h.move(domain.StateServing)
		h.want(t, true, true)
	})
}

// The same for a lease lost before the kernel exists.
func TestALeaseLostWhileBootingKeepsTheKernelDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newLoop(t)
		h.move(domain.StateServing)
		h.move(domain.StateLost)
		h.boot()
		h.want(t, false, false)
		if h.lost != 1 {
			t.Fatalf("lost reported %d times, want once", h.lost)
		}
	})
}

// Fencing stops admission before it stops jobs, so no call is taken while
// the jobs wind down, and stops both before it waits on the broker, which a
// fenced engine may not reach.
func TestFencingStopsAdmissionBeforeJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newLoop(t)
		h.boot()
		h.move(domain.StateServing)
		h.want(t, true, true)
		h.move(domain.StateFenced)
		h.want(t, false, false)
		if got, want := h.steps.String(), "heard serving, subscribe, jobs start, fence, jobs stop, fence confirmed, heard fenced"; got != want {
			t.Fatalf("steps %q, want %q", got, want)
		}
	})
}

// At shutdown jobs stop and stay stopped; the kernel answers on, and after
// a release that was written it answers until drained. A restore of the
// lease once the shutdown has done with the jobs subscribes nothing again.
func TestShutdownStopsJobsAndKeepsAnsweringUntilTheReleaseIsWritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newLoop(t)
		h.boot()
		h.move(domain.StateServing)
		h.shutdownJobs()
		h.want(t, true, false)
		if h.HandedOver() {
			t.Fatalf("handed over before the release")
		}
		h.move(domain.StateFenced)
		h.move(domain.StateServing)
		h.want(t, false, false)
		h.transition(domain.Transition{From: domain.StateServing, To: domain.StateReleased, HandedOver: true})
		synctest.Wait()
		if !h.HandedOver() {
			t.Fatalf("not handed over after the release was written")
		}
	})
}

// A release that was not written (the lease was no longer ours, or the
// write's fate is unknown) fences the kernel at once.
func TestAReleaseNotWrittenFences(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newLoop(t)
		h.boot()
		h.move(domain.StateServing)
		h.shutdownJobs()
		h.transition(domain.Transition{From: domain.StateServing, To: domain.StateReleased})
		synctest.Wait()
		h.want(t, false, false)
		if h.HandedOver() {
			t.Fatalf("handed over although the release was not written")
		}
	})
}

// A kernel that cannot subscribe is fenced and reported once; nothing
// tries again.
func TestAKernelThatCannotServeIsReportedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newLoop(t)
		h.kernel.failServe = errors.New("no broker")
		h.boot()
		h.move(domain.StateServing)
		h.move(domain.StateFenced)
		h.move(domain.StateServing)
		h.want(t, false, false)
		if len(h.failed) != 1 {
			t.Fatalf("failure reported %d times, want once", len(h.failed))
		}
	})
}

// Observers hear of every transition, in order.
func TestObserversHearTransitionsInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newLoop(t)
		for _, s := range []domain.State{domain.StateStandby, domain.StateServing, domain.StateFenced, domain.StateServing} {
			h.move(s)
		}
		want := []domain.State{domain.StateStandby, domain.StateServing, domain.StateFenced, domain.StateServing}
		if !slices.Equal(h.heard, want) {
			t.Fatalf("heard %v, want %v", h.heard, want)
		}
	})
}

// Events sent after the loop closed are dropped, not a panic.
func TestEventsAfterCloseAreDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newLoop(t)
		h.close()
		h.move(domain.StateServing)
		h.shutdownJobs()
		h.want(t, false, false)
	})
}

type fakeTerm struct {
	token      uint64
	ok         bool
	handedOver bool
}

func (f *fakeTerm) Term() (uint64, bool) { return f.token, f.ok }
func (f *fakeTerm) HandedOver() bool     { return f.handedOver }

// Between a shutdown's start and the written release, admission follows the
// lease's clock: a process paused after SIGTERM past its lease takes no
// queued call. Before, shutdown opened admission for good at its start.
// Once the release is written, the engine answers under its last token
// until drained.
func TestAdmissionFollowsTheClockUntilTheReleaseIsWritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newLoop(t)
		h.boot()
		h.move(domain.StateServing)
		lease := &fakeTerm{token: 7, ok: true}
		if tok, ok := h.admit(lease); !ok || tok != 7 {
			t.Fatalf("serving: admit = %d, %v; want 7, true", tok, ok)
		}
		h.shutdownJobs()
		lease.ok = false // the holder's deadline passed while it was paused
		if _, ok := h.admit(lease); ok {
			t.Fatalf("a shutting-down engine past its deadline admits a call")
		}
		lease.handedOver = true
		if tok, ok := h.admit(lease); !ok || tok != 7 {
			t.Fatalf("handed over: admit = %d, %v; want 7, true", tok, ok)
		}
	})
}

// booted returns once the loop has acted on it: an engine that says it has
// started already answers. Before the loop took over, boot subscribed the
// kernel itself; a loop that acted later left a moment with no responder.
func TestBootedReturnsOnceTheKernelServes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newLoop(t)
		h.move(domain.StateServing)
		h.booted(h.kernel, raiseHold{})
		if !h.kernel.subscribed || !h.jobs.running {
			t.Fatalf("booted returned before the kernel served (steps: %s)", h.steps)
		}
	})
}

// Observers hear of a move to serving before the kernel answers, and of a
// fence after it stopped: an observer that saw an engine answer has always
// heard it serves (the chaos run's rule for a stale answer).
func TestObserversHearOfServingBeforeAnswersAndOfAFenceAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newLoop(t)
		h.boot()
		h.move(domain.StateServing)
		h.move(domain.StateFenced)
		if got, want := h.steps.String(), "heard serving, subscribe, jobs start, fence, jobs stop, fence confirmed, heard fenced"; got != want {
			t.Fatalf("steps %q, want %q", got, want)
		}
	})
}

// A job run that does not heed its context, still running at a fence,
// does not hold up the serving loop: when the lease is renewed again the
// kernel is subscribed at once, and the job does not run a second time
// beside the stuck run. Before, the loop waited at the fence for the run
// to return, so an engine that renewed the lease, and was ready, answered
// nothing until the run ended, and no standby took over.
func TestAStuckJobRunDoesNotKeepAFencedEngineFromServingAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newLoop(t)
		jobs := NewJobs(slog.New(slog.DiscardHandler), nil)
		h.serving.jobs = jobs
		unstick := make(chan struct{})
		var running, most, runs atomic.Int32
		if err := jobs.Register(Job{Name: "stuck", Every: time.Second, Run: func(context.Context) error {
			n := running.Add(1)
			defer running.Add(-1)
			if n > most.Load() {
				most.Store(n)
			}
			if runs.Add(1) == 1 {
				<-unstick // heeds no context
			}
			return nil
		}}); err != nil {
			t.Fatal(err)
		}
		h.move(domain.StateServing)
		h.boot()
		time.Sleep(time.Second)
		synctest.Wait()
		if running.Load() != 1 {
			t.Fatalf("the job's first run is not running (%d runs)", runs.Load())
		}
		h.move(domain.StateFenced)
		h.move(domain.StateServing) // restored
		if !h.kernel.subscribed {
			t.Fatalf("a restored engine's kernel is not subscribed while a job run from before the fence still runs (steps: %s)", h.steps)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		close(unstick)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if most.Load() != 1 || runs.Load() < 2 {
			t.Fatalf("%d runs, at most %d at once; want the job to run on once the stuck run ended, never two at once", runs.Load(), most.Load())
		}
		h.shutdownJobs()
	})
}

// At shutdown the serving loop waits for the jobs' runs to return, also
// those a fence cancelled and did not wait for: the engine's stop closes
// the stores and stops the modules next, so a run still going would use
// them closed and go on past the stop. Before, the shutdown of a fenced
// or lost engine returned at once, with such a run still in progress.
func TestTheShutdownOfALostEngineWaitsForTheRunsItsFenceCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newLoop(t)
		jobs := NewJobs(slog.New(slog.DiscardHandler), nil)
		h.serving.jobs = jobs
		finish := make(chan struct{})
		var running atomic.Bool
		if err := jobs.Register(Job{Name: "winding down", Every: time.Second, Run: func(ctx context.Context) error {
			running.Store(true)
			defer running.Store(false)
			<-ctx.Done()
			<-finish // what a run does once cancelled, such as end its write
			return ctx.Err()
		}}); err != nil {
			t.Fatal(err)
		}
		h.boot()
		h.move(domain.StateServing)
		time.Sleep(time.Second)
		synctest.Wait()
		if !running.Load() {
			t.Fatal("the job's run has not begun")
		}
		h.move(domain.StateLost)
		stopped := make(chan struct{})
		go func() {
			h.shutdownJobs()
			close(stopped)
		}()
		synctest.Wait()
		select {
		case <-stopped:
			still := running.Load()
			close(finish)
			if still {
				t.Fatal("the jobs' shutdown returned while a run the fence cancelled was still in progress")
			}
			return
		default:
		}
		close(finish)
		<-stopped
		if running.Load() {
			t.Fatal("the jobs' shutdown returned while a run was still in progress")
		}
	})
}

// shutdownWithAStuckJob starts a serving loop, in a synctest bubble, whose
// one job's run heeds no cancellation, and begins the jobs' shutdown once
// the run is under way: the run returns when unstick closes, and stopped
// closes when the shutdown has returned.
func shutdownWithAStuckJob(t *testing.T) (h *loopHarness, unstick, stopped chan struct{}) {
	t.Helper()
	h = newLoop(t)
	jobs := NewJobs(slog.New(slog.DiscardHandler), nil)
	jobs.stopLimit = 20 * time.Second
	h.serving.jobs = jobs
	unstick = make(chan struct{})
	var running atomic.Bool
	if err := jobs.Register(Job{Name: "stuck", Every: time.Second, Run: func(context.Context) error {
		running.Store(true)
		<-unstick // heeds no context
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	h.boot()
	h.move(domain.StateServing)
	time.Sleep(time.Second)
	synctest.Wait()
	if !running.Load() {
		t.Fatal("the job's run has not begun")
	}
	stopped = make(chan struct{})
	go func() {
		h.shutdownJobs()
		close(stopped)
	}()
	synctest.Wait()
	return h, unstick, stopped
}

// A fence that comes while the shutdown waits for a job run that does not
// heed its cancellation is acted on at once: the kernel stops taking and
// running calls, as at any other fence. Before, the serving loop itself
// waited for the run, up to a lease, and heard of the fence only then, so
// the calls it ran went on past the fence, and past a successor's
// takeover.
func TestAFenceDuringAShutdownThatWaitsForAStuckJobRunIsActedOnAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, unstick, stopped := shutdownWithAStuckJob(t)
		h.move(domain.StateFenced)
		subscribed := h.kernel.subscribed
		select {
		case <-stopped:
			t.Fatal("the shutdown did not wait for the stuck run")
		default:
		}
		close(unstick)
		<-stopped
		if subscribed {
			t.Fatalf("the kernel still served after a fence that came while the shutdown waited for a stuck job run (steps: %s)", h.steps)
		}
	})
}

// A renewal that succeeds again after a fence, while the stop waits for a
// job run that does not heed its cancellation, subscribes the kernel again:
// the engine holds the lease until the stop releases it, and no standby
// may take over meanwhile, so it answers by the lease's clock, as it did
// before the fence. Once the stop has done with the jobs, nothing
// subscribes the kernel again. Before, the restored engine held and
// renewed the lease for up to a lease more, answering nothing.
func TestARestoreWhileTheShutdownWaitsForAStuckJobRunServesAgainUntilTheJobsAreDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, unstick, stopped := shutdownWithAStuckJob(t)
		h.move(domain.StateFenced)
		if h.kernel.subscribed {
			t.Fatalf("the kernel still served after a fence during the shutdown (steps: %s)", h.steps)
		}
		h.move(domain.StateServing) // a renewal succeeded again
		restored := h.kernel.subscribed
		select {
		case <-stopped:
			t.Fatal("the shutdown did not wait for the stuck run")
		default:
		}
		close(unstick)
		<-stopped
		if !restored {
			t.Fatalf("a restored engine answered nothing while its stop waited for a stuck job run (steps: %s)", h.steps)
		}
		h.move(domain.StateFenced)
		h.move(domain.StateServing)
		if h.kernel.subscribed {
			t.Fatalf("the kernel was subscribed again after the shutdown had done with the jobs (steps: %s)", h.steps)
		}
	})
}

// fakeHolds records, among the loop's steps, what the stores were told of
// a term's raise of their fence, as the time from base.
type fakeHolds struct {
	steps *steps
	base  time.Time
}

func (f fakeHolds) holdRaise(token uint64, until time.Time, _ domain.Clock) {
	f.steps.add(fmt.Sprintf("hold %d for %v", token, until.Sub(f.base)))
}

// A term taken from a holder that released the lease tells the stores to
// hold the raise of their fence for the drain and a lease, counted from
// the take, before the kernel answers a call of it: on an engine that
// serves at once, whose stores open after the take, and on a standby,
// whose stores opened before (ADR 0023).
func TestATermTakenFromAReleaseHoldsTheObjectStoresRaiseForTheDrainAndALease(t *testing.T) {
	released := domain.Holder{InstanceID: "0123456789abcdef0123456789abcdef", Released: true}
	for _, c := range []struct {
		name      string
		from      domain.State
		bootFirst bool
	}{
		{"ServesAtOnce", domain.StateIdle, false},
		{"Standby", domain.StateStandby, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := takeAndBoot(t, domain.Transition{From: c.from, To: domain.StateServing, Term: 7, Previous: released}, c.bootFirst)
				if got, want := h.steps.String(), "heard serving, hold 7 for 1m20s, subscribe, jobs start"; got != want {
					t.Fatalf("steps %q, want %q", got, want)
				}
			})
		})
	}
}

// takeAndBoot is a loop that hears of the take tr and is booted with
// stores that record what they are told (fakeHolds), before the take when
// bootFirst, as a standby is, else a second after it on the bubble's
// clock, as an engine that serves at once opens its stores after its
// claim. Their raise is held for 80 s after a release.
func takeAndBoot(t *testing.T, tr domain.Transition, bootFirst bool) *loopHarness {
	h := newLoop(t)
	holds := fakeHolds{steps: h.steps, base: time.Now()}
	boot := func() { h.booted(h.kernel, raiseHold{stores: holds, bound: 80 * time.Second}) }
	if bootFirst {
		boot()
	}
	h.transition(tr)
	synctest.Wait()
	time.Sleep(time.Second)
	if !bootFirst {
		boot()
	}
	return h
}

// A term not taken from a release, one taken after a lease of silence or
// from a free lease, tells the stores too, before the kernel answers a
// call of it, with a hold that ends at the take: the stores raise their
// fence to it at once, whether it writes to them or not, so that it
// leaves the fence at its term for a successor's hold (ADR 0023). Before,
// such a term told the stores nothing, and one that never wrote an object
// left the fence below its term, for an engine older than it, paused, to
// write through its successor's hold.
func TestATermNotTakenFromAReleaseHasTheStoresRaiseTheirFenceAtOnce(t *testing.T) {
	silent := domain.Holder{InstanceID: "0123456789abcdef0123456789abcdef"}
	for _, c := range []struct {
		name      string
		from      domain.State
		previous  domain.Holder
		bootFirst bool
	}{
		{"AfterSilence", domain.StateIdle, silent, false},
		{"StandbyAfterSilence", domain.StateStandby, silent, true},
		{"FreeLease", domain.StateIdle, domain.Holder{}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := takeAndBoot(t, domain.Transition{From: c.from, To: domain.StateServing, Term: 7, Previous: c.previous}, c.bootFirst)
				if got, want := h.steps.String(), "heard serving, hold 7 for 0s, subscribe, jobs start"; got != want {
					t.Fatalf("steps %q, want %q", got, want)
				}
			})
		})
	}
}

// A renewal that succeeds again after a fence restores the same term: the
// stores, told of it when it began, are told nothing more. Told again, a
// term taken from a release would have its hold ended at the restore, and
// its predecessor's draining uploads refused.
func TestARestoreAfterAFenceTellsTheStoresNothingMore(t *testing.T) {
	for _, c := range []struct {
		name     string
		previous domain.Holder
	}{
		{"Released", domain.Holder{InstanceID: "0123456789abcdef0123456789abcdef", Released: true}},
		{"AfterSilence", domain.Holder{InstanceID: "0123456789abcdef0123456789abcdef"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := takeAndBoot(t, domain.Transition{From: domain.StateStandby, To: domain.StateServing, Term: 7, Previous: c.previous}, true)
				h.transition(domain.Transition{From: domain.StateServing, To: domain.StateFenced, Term: 7})
				h.transition(domain.Transition{From: domain.StateFenced, To: domain.StateServing, Term: 7})
				synctest.Wait()
				if got := h.steps.String(); strings.Count(got, "hold ") != 1 {
					t.Fatalf("steps %q, want the stores told once, when the term began", got)
				}
			})
		})
	}
}

// A lease key made anew by the engine after someone deleted it gives the
// engine a new term, which it serves once restored after its fence: the
// stores are told of that term, with the hold of the term before, so a
// predecessor still draining is held as long, and an engine older than
// both is refused once the hold ends. Before, a restore told the stores
// nothing, and the new term's first object write raised the fence at once
// in a hold, refusing the predecessor's drain, or, with no write, left the
// fence at the term before.
func TestALeaseKeyMadeAnewTellsTheStoresOfItsTermWithTheHoldOfTheTermBefore(t *testing.T) {
	for _, c := range []struct {
		name     string
		previous domain.Holder
		want     string
	}{
		{"Released", domain.Holder{InstanceID: "0123456789abcdef0123456789abcdef", Released: true}, "hold 9 for 1m20s"},
		{"AfterSilence", domain.Holder{InstanceID: "0123456789abcdef0123456789abcdef"}, "hold 9 for 0s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := takeAndBoot(t, domain.Transition{From: domain.StateStandby, To: domain.StateServing, Term: 7, Previous: c.previous}, true)
				h.transition(domain.Transition{From: domain.StateServing, To: domain.StateFenced, Term: 7})
				h.transition(domain.Transition{From: domain.StateFenced, To: domain.StateServing, Term: 9})
				synctest.Wait()
				got := h.steps.String()
				if !strings.Contains(got, c.want) || strings.Count(got, "hold ") != 2 {
					t.Fatalf("steps %q, want the stores told of term 9 once, with term 7's hold: %q", got, c.want)
				}
			})
		})
	}
}

// suspendingClock is the lease's clock of a host suspended for suspended
// since the clock began: Go's clock moved on by the suspend, as
// suspendclock counts it.
type suspendingClock struct{ suspended atomic.Int64 }

func (c *suspendingClock) Now() time.Time {
	return time.Now().Add(time.Duration(c.suspended.Load()))
}

func (c *suspendingClock) suspend(d time.Duration) { c.suspended.Add(int64(d)) }

// judgedHold is a store told to hold its raise, which judges the hold as
// the stores do: held while the clock it was told reads before until.
type judgedHold struct {
	mu    sync.Mutex
	until time.Time
	clock domain.Clock
}

func (j *judgedHold) holdRaise(_ uint64, until time.Time, clock domain.Clock) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.until, j.clock = until, clock
}

func (j *judgedHold) held() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.clock != nil && j.clock.Now().Before(j.until)
}

// The hold of the stores' raise after a release is counted on the lease's
// clock, which counts the time the host spent suspended, from the take:
// a suspend of the host before the take moves neither end, and one within
// the hold uses it up, as the predecessor's drain went on meanwhile. On
// Go's clock, which stands still in a suspend, the hold would outlast the
// drain by the suspend, and leave the predecessor's late writes unfenced.
func TestTheHoldOfTheStoresRaiseCountsTheTimeTheHostWasSuspended(t *testing.T) {
	const bound = 80 * time.Second
	synctest.Test(t, func(t *testing.T) {
		h := newLoop(t)
		h.clock.suspend(time.Hour) // before the take
		stores := &judgedHold{}
		h.booted(h.kernel, raiseHold{stores: stores, bound: bound})
		h.transition(domain.Transition{
			From: domain.StateStandby, To: domain.StateServing, Term: 7,
			Previous: domain.Holder{InstanceID: "0123456789abcdef0123456789abcdef", Released: true},
		})
		synctest.Wait()
		if !stores.held() {
			t.Fatalf("the raise is not held at the take (until %v)", stores.until)
		}
		time.Sleep(bound / 2)
		if !stores.held() {
			t.Fatalf("the raise is not held half a bound after the take (until %v)", stores.until)
		}
		h.clock.suspend(bound / 2)
		if stores.held() {
			t.Fatalf("the raise is still held after half a bound and a suspend of half a bound (until %v, the clock reads %v)",
				stores.until, stores.clock.Now())
		}
	})
}
