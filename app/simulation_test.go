package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/lease/memory"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/leasetest"
)

var (
	engineSimSeeds  = flag.Int("engine-sim.seeds", 2000, "how many seeds the whole-engine simulation runs")
	engineSimSeed   = flag.Int64("engine-sim.seed", 0, "replay this one seed of the whole-engine simulation with its trace (0: run -engine-sim.seeds seeds)")
	engineSimCounts = flag.Bool("engine-sim.counts", false, "print how often each rare path of the whole-engine simulation ran")
	// A clock that stops during a suspend is what the engine judged its
	// lease by before it took one that counts suspend; with it the
	// simulation must find two engines serving.
	// A bucket made anew starts its revisions again from 1, so a
	// compare-and-swap on a revision seen before it can land on another
	// engine's record of the same number. Today's lease cannot tell the
	// two apart and the simulation finds two engines serving; until that
	// is closed the fault is off by default.
	engineSimRemade = flag.Bool("engine-sim.remade-bucket", false, "also make the lease bucket anew, restarting its revisions (fails on today's lease)")
	// An engine that creates a key with no value waits half a lease, as
	// long as a holder that renewed before the key went serves on: with
	// clocks at different rates the two halves differ, and the simulation
	// finds the overlap (up to the spread times half a lease). Off by
	// default until that wait has a margin.
	engineSimRate      = flag.Float64("engine-sim.rate-spread", 0, "let each engine's clock run up to this fraction faster or slower than true time (0.01 fails on today's lease)")
	engineSimMonotonic = flag.Bool("engine-sim.monotonic", false, "judge each engine's lease on a clock that stops while the machine is suspended (expected to fail)")
)

// The simulation's lease, and the bounds of its faults, in leases.
const (
	simL           = time.Second
	simEngineSlots = 3
	simFaultPhase  = 24 * simL
	// simQuiet follows the last fault: a fault's effects last up to three
	// leases, then a lease and a half of silence and a standby's takeover
	// at most, of the longest lease an engine runs on.
	simQuiet = 8 * simLongest
	// simLongest is the longest of simLeases.
	simLongest = 2 * simL
	simStep    = simL / 50
)

// simLeases are the leases an engine may be configured with: an account's
// engines need not share one (a deploy changes lease_seconds; a command
// runs on the default beside an engine configured otherwise).
var simLeases = []time.Duration{simL, simLongest}

// TestEngineSimulation runs whole engines on three hosts over one lease
// store: each is the real Ownership and the real serving loop, with a
// kernel and jobs that record when they admit calls and run. Engines boot
// (their backends take a random time to open), serve, and stop as Stop
// does (jobs stop, the lease is released, a handed-over kernel drains),
// and restart or are deployed as new releases, some as hot standbys.
// Each engine is configured with a lease of one or two simL (simLeases).
// Faults: calls cut off, requests and replies delayed, replies lost, writes
// refused at once, processes paused (also while booting and while stopping) and suspended,
// reads and watches that lag behind the store as a replica's do, the key
// deleted, the stream purged, the bucket made anew, clocks running at
// different rates. Every fiftieth of a lease it checks that no two engines
// admit a call or run a job at once, outside the overlap a written release
// allows for its drain; after the faults stop, exactly one engine must
// serve. Across all seeds, each rare path the faults lead to must have run.
func TestEngineSimulation(t *testing.T) {
	seeds := make([]int64, 0, *engineSimSeeds)
	if *engineSimSeed != 0 {
		seeds = append(seeds, *engineSimSeed)
	} else {
		for s := range *engineSimSeeds {
			seeds = append(seeds, int64(s+1))
		}
	}
	var mu sync.Mutex
	var total simCounts
	t.Run("seeds", func(t *testing.T) {
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
				t.Parallel()
				var c simCounts
				synctest.Test(t, func(t *testing.T) { c = simulateEngines(t, seed) })
				if t.Failed() {
					t.Logf("replay: go test ./app -run 'TestEngineSimulation/seeds/seed=%d$' -engine-sim.seed=%d -v", seed, seed)
				}
				mu.Lock()
				total.add(c)
				mu.Unlock()
			})
		}
	})
	summary := fmt.Sprintf("%d seeds:\n%s", len(seeds), &total)
	if *engineSimCounts {
		fmt.Println(summary)
	}
	t.Log(summary)
	// Each path is rare per seed; across a full run every one must show.
	if len(seeds) >= 1000 && !t.Failed() {
		for _, p := range simPaths {
			if p == pathRecreateTakeover && !*engineSimRemade {
				continue
			}
			if total.paths[p] == 0 {
				t.Errorf("no seed reached %q: the faults no longer lead there", p)
			}
		}
	}
}

// The rare paths the faults must reach, by the name the counts print.
const (
	pathRecreated        = "holder re-created a deleted key"
	pathLostAcquiring    = "lost while waiting to serve"
	pathFencedBooting    = "fenced while booting"
	pathPurgeTakenOver   = "served again after a purge"
	pathRecreateTakeover = "served again after the bucket was made anew"
	pathSuspendFence     = "fenced by a suspend"
	pathHandedOver       = "handed-over engine answered next to its successor"
	pathBootPause        = "paused while booting"
	pathShutdownPause    = "paused while stopping"
	pathStaleRead        = "served through lagging reads"
)

var simPaths = []string{
	pathRecreated, pathLostAcquiring, pathFencedBooting, pathPurgeTakenOver, pathRecreateTakeover,
	pathSuspendFence, pathHandedOver, pathBootPause, pathShutdownPause, pathStaleRead,
}

type simCounts struct {
	checks, admitting, faults, engines int
	paths                              map[string]int
}

func (c *simCounts) path(p string) {
	if c.paths == nil {
		c.paths = map[string]int{}
	}
	c.paths[p]++
}

func (c *simCounts) add(o simCounts) {
	c.checks += o.checks
	c.admitting += o.admitting
	c.faults += o.faults
	c.engines += o.engines
	for p, n := range o.paths {
		if c.paths == nil {
			c.paths = map[string]int{}
		}
		c.paths[p] += n
	}
}

func (c *simCounts) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %d checks, %d engine-instants admitting, %d faults, %d engines started\n", c.checks, c.admitting, c.faults, c.engines)
	for _, p := range simPaths {
		fmt.Fprintf(&b, "  %8d  %s\n", c.paths[p], p)
	}
	return strings.TrimRight(b.String(), "\n")
}

// simWorld is one seed's run: the store, the hosts, the trace and counts.
type simWorld struct {
	t     *testing.T
	start time.Time
	store *simHistory
	trace *simTrace

	mu        sync.Mutex
	counts    simCounts
	lastReset string // the path a purge or a re-made bucket leads to, until someone serves
}

func (w *simWorld) count(p string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.counts.path(p)
}

// simHost is one machine: engine processes start on it one after another;
// network faults, pauses and suspends belong to it.
type simHost struct {
	name  string
	w     *simWorld
	view  *simLagView
	store *leasetest.Faulty
	rng   *rand.Rand

	mu         sync.Mutex
	engines    []*simEngine // the current one last; earlier ones may still drain
	frozenTill time.Time    // nothing of the host runs before this
	suspends   [][2]time.Time
}

// suspendedBy is how long the host has been suspended up to t.
func (h *simHost) suspendedBy(t time.Time) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	var d time.Duration
	for _, s := range h.suspends {
		if t.After(s[0]) {
			end := s[1]
			if t.Before(end) {
				end = t
			}
			d += end.Sub(s[0])
		}
	}
	return d
}

// frozen reports whether the host's processes are stopped now.
func (h *simHost) frozen() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return time.Now().Before(h.frozenTill)
}

// thaw waits until the host's processes run again.
func (h *simHost) thaw() {
	for {
		h.mu.Lock()
		wait := time.Until(h.frozenTill)
		h.mu.Unlock()
		if wait <= 0 {
			return
		}
		time.Sleep(wait)
	}
}

// freeze stops the host for d: its lease calls are held, its clocks are
// not read, its loops do not run. A suspend also stops the monotonic
// clock, which the engine must not judge its lease by.
func (h *simHost) freeze(d time.Duration, suspend bool) {
	h.mu.Lock()
	till := time.Now().Add(d)
	if till.After(h.frozenTill) {
		if suspend {
			from := time.Now()
			if h.frozenTill.After(from) {
				from = h.frozenTill
			}
			h.suspends = append(h.suspends, [2]time.Time{from, till})
		}
		h.frozenTill = till
	}
	left := time.Until(h.frozenTill)
	h.mu.Unlock()
	h.store.Pause(left)
}

// sleep waits d of the host's running time.
func (h *simHost) sleep(ctx context.Context, d time.Duration) {
	sleepCtx(ctx, d)
	h.thaw()
}

// simClock is one engine's clock: it runs at its own rate and counts the
// time its host was suspended, unless -engine-sim.monotonic makes it stand
// still then, as Go's monotonic clock does. It never blocks: the Ownership
// reads it under its lock.
type simClock struct {
	host *simHost
	base time.Time
	rate float64
}

func (c *simClock) Now() time.Time {
	now := time.Now()
	t := now
	if *engineSimMonotonic {
		t = t.Add(-c.host.suspendedBy(now))
	}
	return c.base.Add(time.Duration(float64(t.Sub(c.base)) * c.rate))
}

// simEngine is one engine process: the real ownership and serving loop,
// a kernel and jobs that record what they do.
type simEngine struct {
	name   string
	host   *simHost
	timing domain.Timing
	o      *domain.Ownership
	sv     *serving
	kernel *simKernel
	jobs   *simJobs

	suspendPending atomic.Bool
	lastTerm       uint64 // the serving loop's goroutine only
	stop           chan struct{}
	stopOnce       sync.Once
}

func (e *simEngine) stopSoon() { e.stopOnce.Do(func() { close(e.stop) }) }

// simKernel is subscribed or not; a closed one takes no call whatever the
// lease says.
type simKernel struct {
	host       *simHost
	mu         sync.Mutex
	subscribed bool
	closed     bool
}

func (k *simKernel) serve() error {
	k.host.thaw()
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.closed {
		k.subscribed = true
	}
	return nil
}

func (k *simKernel) fence() func() {
	k.host.thaw()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.subscribed = false
	return func() {}
}

func (k *simKernel) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.subscribed, k.closed = false, true
}

func (k *simKernel) up() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.subscribed
}

type simJobs struct {
	host    *simHost
	running atomic.Bool
}

func (j *simJobs) Start() { j.host.thaw(); j.running.Store(true) }
func (j *simJobs) Stop()  { j.host.thaw(); j.running.Store(false) }

// Cancel is Stop: a simulated job's runs are instants, never in progress.
func (j *simJobs) Cancel() { j.Stop() }

func simulateEngines(t *testing.T, seed int64) simCounts {
	start := time.Now()
	w := &simWorld{
		t: t, start: start, store: newSimHistory(),
		trace: &simTrace{start: start},
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	hosts := make([]*simHost, simEngineSlots)
	for i := range hosts {
		view := &simLagView{h: w.store}
		hosts[i] = &simHost{
			name: fmt.Sprintf("h%d", i), w: w, view: view, store: leasetest.Wrap(view),
			rng: rand.New(rand.NewPCG(uint64(seed), uint64(i+1))),
		}
	}
	for _, h := range hosts {
		wg.Go(func() { h.run(ctx) })
	}
	faultRng := rand.New(rand.NewPCG(uint64(seed), 0))
	wg.Go(func() {
		for {
			time.Sleep(time.Duration(faultRng.Int64N(int64(3*simL/2))) + simL/2)
			if time.Since(start) >= simFaultPhase {
				return
			}
			w.trace.log("fault: %s", w.inject(faultRng, hosts))
			w.mu.Lock()
			w.counts.faults++
			w.mu.Unlock()
		}
	})

	var violations []string
	for time.Since(start) < simFaultPhase+simQuiet {
		time.Sleep(simStep)
		if v := w.check(hosts); v != "" {
			w.trace.log("VIOLATION: %s", v)
			violations = append(violations, fmt.Sprintf("at %v: %s", time.Since(start), v))
		}
	}
	var serving int
	var end []string
	for _, h := range hosts {
		for _, e := range h.current() {
			if _, ok := e.sv.admit(e.o); ok && e.kernel.up() {
				serving++
			}
			end = append(end, fmt.Sprintf("%s %s", e.name, e.o.State()))
		}
	}
	rec, _ := w.store.Read(context.Background())
	end = append(end, fmt.Sprintf("lease %+v", rec))
	stop()
	wg.Wait()

	for i, v := range violations {
		if i == 5 {
			t.Errorf("... and %d more", len(violations)-5)
			break
		}
		t.Errorf("%s", v)
	}
	if serving != 1 {
		t.Errorf("%v after the last fault, %d engines serve, want 1: %s", simQuiet, serving, end)
	}
	if w.counts.admitting == 0 {
		t.Errorf("no engine ever admitted a call")
	}
	if t.Failed() || *engineSimSeed != 0 {
		t.Logf("what happened:\n%s", w.trace)
	}
	return w.counts
}

func (h *simHost) current() []*simEngine {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.engines)
}

// check samples every engine that runs: which admit a call, which run
// jobs. It returns what was wrong, if anything.
func (w *simWorld) check(hosts []*simHost) string {
	var admitting, handedOver, jobs []string
	var problems []string
	for _, h := range hosts {
		if h.frozen() {
			continue // a stopped process takes no call and runs no job
		}
		for _, e := range h.current() {
			if e.jobs.running.Load() {
				jobs = append(jobs, e.name)
			}
			if !e.kernel.up() {
				continue
			}
			if _, ok := e.sv.admit(e.o); !ok {
				continue
			}
			if at, ok := w.store.releasedAt(e.o.Me().InstanceID); ok {
				// Its release is in the store: the engine hears of it
				// within a renewal period and answers until drained.
				handedOver = append(handedOver, e.name)
				if since, most := time.Since(at), e.timing.Drain+e.timing.Renew(); since > most {
					problems = append(problems, fmt.Sprintf("%s admits %v after its release was written, past the drain and the release's reply (%v)", e.name, since, most))
				}
				continue
			}
			admitting = append(admitting, e.name)
		}
	}
	w.mu.Lock()
	w.counts.checks++
	w.counts.admitting += len(admitting) + len(handedOver)
	if len(handedOver) > 0 && len(admitting) > 0 {
		w.counts.path(pathHandedOver)
	}
	w.mu.Unlock()
	if len(admitting) > 1 {
		problems = append(problems, strings.Join(admitting, ", ")+" all admit calls")
	}
	if len(jobs) > 1 {
		problems = append(problems, strings.Join(jobs, ", ")+" all run jobs")
	}
	return strings.Join(problems, "; ")
}

// run starts engines on the host one after another until ctx ends.
func (h *simHost) run(ctx context.Context) {
	rollouts := []string{"", "v1", "v2"}
	for ctx.Err() == nil {
		me := domain.ThisProcess("sim", rollouts[h.rng.IntN(len(rollouts))])
		me.Host = h.name
		e := &simEngine{host: h, stop: make(chan struct{})}
		e.timing = domain.Timing{Lease: simLeases[h.rng.IntN(len(simLeases))], StandbyTimeout: 20 * simL, Drain: simL}
		e.name = h.name + "/" + me.InstanceID[:6]
		if me.RolloutID != "" {
			e.name += "@" + me.RolloutID
		}
		if e.timing.Lease != simL {
			e.name += fmt.Sprintf("[%v]", e.timing.Lease)
		}
		e.kernel = &simKernel{host: h}
		e.jobs = &simJobs{host: h}
		clock := &simClock{host: h, base: time.Now(), rate: 1 + *engineSimRate*(2*h.rng.Float64()-1)}
		var sv *serving
		sv = newServing(slog.New(slog.DiscardHandler), e.jobs, clock, e.stopSoon, func(error) { e.stopSoon() },
			func(tr domain.Transition) { e.heard(sv, tr) })
		e.sv = sv
		opts := []domain.Option{
			domain.WithLogger(slog.New(slog.DiscardHandler)), domain.WithObserver(sv.transition), domain.WithClock(clock),
		}
		hot := h.rng.IntN(3) == 0
		if hot {
			opts = append(opts, domain.WithHotStandby())
			e.name += "(hot)"
		}
		o, err := domain.NewOwnership(h.store, me, e.timing, opts...)
		if err != nil {
			h.w.t.Errorf("NewOwnership: %v", err)
			return
		}
		e.o = o
		h.w.mu.Lock()
		h.w.counts.engines++
		h.w.mu.Unlock()
		h.w.trace.log("%s starts, clock rate %.4f", e.name, clock.rate)
		h.mu.Lock()
		h.engines = append(h.engines, e)
		h.mu.Unlock()
		e.life(ctx)
		h.mu.Lock()
		h.engines = slices.DeleteFunc(h.engines, func(x *simEngine) bool { return x == e })
		h.mu.Unlock()
		h.sleep(ctx, time.Duration(h.rng.Int64N(int64(simL))))
	}
}

// heard is the serving loop's observer: it runs after the loop acted on tr.
func (e *simEngine) heard(sv *serving, tr domain.Transition) {
	w := e.host.w
	w.trace.log("%s: %s at revision %d term %d handed over %v", e.name, tr, tr.Record.Revision, tr.Term, tr.HandedOver)
	switch tr.To {
	case domain.StateFenced, domain.StateLost:
		if sv.kernel == nil {
			w.count(pathFencedBooting)
		}
		if e.suspendPending.Swap(false) {
			w.count(pathSuspendFence)
		}
	case domain.StateServing:
		if e.lastTerm != 0 && tr.Term != e.lastTerm {
			w.count(pathRecreated)
		}
		e.lastTerm = tr.Term
		w.mu.Lock()
		reset := w.lastReset
		w.lastReset = ""
		w.mu.Unlock()
		if reset != "" {
			w.count(reset)
		}
		if e.host.view.lagging() {
			w.count(pathStaleRead)
		}
	}
}

// life runs one engine as Engine.Start and Engine.Stop do, with a boot of
// random length and, now and then, a pause while booting or stopping.
func (e *simEngine) life(ctx context.Context) {
	h, w, rng := e.host, e.host.w, e.host.rng
	defer e.sv.close()
	out, err := e.o.Claim(ctx, domain.RoleServe)
	if err != nil {
		if errors.Is(err, domain.ErrLeaseLost) {
			w.count(pathLostAcquiring)
		}
		w.trace.log("%s: claim: %v", e.name, err)
		_ = e.o.Release(context.Background())
		return
	}
	boot := time.Duration(rng.Int64N(int64(3 * simL / 2)))
	if rng.IntN(4) == 0 {
		at, d := time.Duration(rng.Int64N(int64(boot+1))), simL/2+time.Duration(rng.Int64N(int64(simL)))
		time.AfterFunc(at, func() {
			w.trace.log("%s paused for %v while booting", e.name, d)
			w.count(pathBootPause)
			h.freeze(d, false)
		})
	}
	h.sleep(ctx, boot)
	e.sv.booted(e.kernel, raiseHold{})
	var awaiting chan struct{}
	actx, cancelAwait := context.WithCancel(context.Background())
	defer cancelAwait()
	if out == domain.OutcomeStandby {
		awaiting = make(chan struct{})
		go func() {
			defer close(awaiting)
			err := e.o.AwaitLease(actx)
			switch {
			case err == nil:
			case actx.Err() != nil:
			default:
				if errors.Is(err, domain.ErrLeaseLost) {
					w.count(pathLostAcquiring)
				}
				w.trace.log("%s: standby stops: %v", e.name, err)
				e.stopSoon()
			}
		}()
	}
	// Deploys and restarts come during the faults, never in the quiet end.
	restart := time.Duration(rng.Int64N(int64(10*simL))) + 2*simL
	if time.Since(w.start)+restart > simFaultPhase {
		restart = simFaultPhase + simQuiet + simL
	}
	timer := time.NewTimer(restart)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-e.stop:
	case <-timer.C:
	}
	h.thaw()
	w.trace.log("%s stops", e.name)

	// Stop: the standby's wait ends, jobs stop, the lease is released, a
	// handed-over kernel drains, and everything closes.
	cancelAwait()
	if awaiting != nil {
		<-awaiting
	}
	e.sv.shutdownJobs()
	if rng.IntN(4) == 0 {
		// After SIGTERM, before the release: the kernel still answers by
		// the lease's clock.
		d := simL/2 + time.Duration(rng.Int64N(int64(simL)))
		w.trace.log("%s paused for %v while stopping", e.name, d)
		w.count(pathShutdownPause)
		h.freeze(d, false)
		h.thaw()
	}
	_ = e.o.Release(context.Background())
	if e.sv.HandedOver() {
		h.sleep(context.Background(), time.Duration(rng.Int64N(int64(e.timing.Drain))))
	}
	e.kernel.close()
}

// inject draws one fault and says what it did.
func (w *simWorld) inject(rng *rand.Rand, hosts []*simHost) string {
	h := hosts[rng.IntN(len(hosts))]
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	switch rng.IntN(10) {
	case 0:
		d := between(simL/5, 2*simL)
		h.store.Cut(true)
		time.AfterFunc(d, func() { h.store.Cut(false) })
		return fmt.Sprintf("%s cut off for %v", h.name, d)
	case 1:
		req, reply, d := between(0, simL/3), between(0, simL/3), between(simL, 3*simL)
		h.store.Delay(req, reply)
		time.AfterFunc(d, func() { h.store.Delay(0, 0) })
		return fmt.Sprintf("%s requests delayed %v, replies %v, for %v", h.name, req, reply, d)
	case 2:
		n := 1 + rng.IntN(2)
		h.store.LoseReplies(n)
		return fmt.Sprintf("%s loses its next %d replies", h.name, n)
	case 3:
		d := between(6*simL/10, 3*simL/2)
		h.freeze(d, false)
		return fmt.Sprintf("%s paused for %v", h.name, d)
	case 4:
		d := between(simL/4, 2*simL)
		for _, e := range h.current() {
			if e.o.MayServe() {
				e.suspendPending.Store(true)
			}
		}
		h.freeze(d, true)
		return fmt.Sprintf("%s suspended for %v", h.name, d)
	case 5:
		lag, d := between(simL/10, 3*simL/2), between(simL, 4*simL)
		h.view.setLag(lag)
		time.AfterFunc(d, func() { h.view.setLag(0) })
		return fmt.Sprintf("%s reads and watches %v behind, for %v", h.name, lag, d)
	case 6:
		w.store.purge()
		w.mu.Lock()
		w.lastReset = pathPurgeTakenOver
		w.mu.Unlock()
		return "the lease stream purged"
	case 7:
		if !*engineSimRemade {
			w.store.purge()
			w.mu.Lock()
			w.lastReset = pathPurgeTakenOver
			w.mu.Unlock()
			return "the lease stream purged"
		}
		w.store.recreate()
		w.mu.Lock()
		w.lastReset = pathRecreateTakeover
		w.mu.Unlock()
		return "the lease bucket deleted and made anew"
	case 8:
		n := 1 + rng.IntN(3)
		h.store.RefuseWrites(n)
		return fmt.Sprintf("%s has its next %d writes refused", h.name, n)
	default:
		rec, err := w.store.Read(context.Background())
		if err == nil && rec.Present {
			err = w.store.Delete(context.Background(), rec.Revision)
		}
		return fmt.Sprintf("the key deleted by a third party at revision %d (%v)", rec.Revision, err)
	}
}

// simHistory is the lease store with every state it took and when, so a
// replica's view some time behind can be answered.
type simHistory struct {
	inner *memory.Lease

	mu       sync.Mutex
	states   []simState // oldest first; the first may predate every view
	changed  chan struct{}
	released map[string]time.Time // when each instance's released record was written
}

type simState struct {
	at  time.Time
	rec domain.Record
}

func newSimHistory() *simHistory {
	return &simHistory{inner: memory.New(), states: []simState{{at: time.Now()}}, changed: make(chan struct{}), released: map[string]time.Time{}}
}

// releasedAt is when the released record of instance was written, if it was.
func (s *simHistory) releasedAt(instance string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.released[instance]
	return at, ok
}

// apply runs a change on the store and notes the state it leaves.
func (s *simHistory) apply(op func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := op()
	rec, _ := s.inner.Read(context.Background())
	now := time.Now()
	if last := s.states[len(s.states)-1]; last.rec != rec {
		if rec.Holder.Released {
			if _, ok := s.released[rec.Holder.InstanceID]; !ok {
				s.released[rec.Holder.InstanceID] = now
			}
		}
		s.states = append(s.states, simState{at: now, rec: rec})
		// Nothing lags more than two leases: older states go.
		for len(s.states) > 2 && s.states[1].at.Before(now.Add(-2*simL)) {
			s.states = s.states[1:]
		}
	}
	close(s.changed)
	s.changed = make(chan struct{})
	return err
}

func (s *simHistory) purge()    { _ = s.apply(func() error { s.inner.Purge(); return nil }) }
func (s *simHistory) recreate() { _ = s.apply(func() error { s.inner.Recreate(); return nil }) }

// at is the record as it stood at t, when the next state shows after t
// (zero if none), and a channel closed at the next change.
func (s *simHistory) at(t time.Time) (domain.Record, time.Time, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := len(s.states) - 1
	for i > 0 && s.states[i].at.After(t) {
		i--
	}
	var next time.Time
	if i+1 < len(s.states) {
		next = s.states[i+1].at
	}
	return s.states[i].rec, next, s.changed
}

func (s *simHistory) Read(ctx context.Context) (domain.Record, error) { return s.inner.Read(ctx) }

func (s *simHistory) Create(ctx context.Context, h domain.Holder) (rev uint64, err error) {
	err = s.apply(func() error { rev, err = s.inner.Create(ctx, h); return err })
	return rev, err
}

func (s *simHistory) Update(ctx context.Context, h domain.Holder, r uint64) (rev uint64, err error) {
	err = s.apply(func() error { rev, err = s.inner.Update(ctx, h, r); return err })
	return rev, err
}

func (s *simHistory) Advertise(ctx context.Context, d time.Duration) (time.Duration, error) {
	return s.inner.Advertise(ctx, d)
}

func (s *simHistory) Delete(ctx context.Context, rev uint64) error {
	return s.apply(func() error { return s.inner.Delete(ctx, rev) })
}

// simLagView is one host's way to the store: writes reach the store
// itself, reads and watches may come from a replica some time behind.
// Writes are compare-and-swap, so a stale read costs at most a retry or a
// wrong belief that the lease was lost.
type simLagView struct {
	h   *simHistory
	mu  sync.Mutex
	lag time.Duration
}

var _ domain.Lease = (*simLagView)(nil)

func (v *simLagView) setLag(d time.Duration) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.lag = d
}

func (v *simLagView) lagging() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.lag > 0
}

func (v *simLagView) seen() (domain.Record, time.Time, <-chan struct{}, time.Duration) {
	v.mu.Lock()
	lag := v.lag
	v.mu.Unlock()
	rec, next, changed := v.h.at(time.Now().Add(-lag))
	return rec, next, changed, lag
}

func (v *simLagView) Read(ctx context.Context) (domain.Record, error) {
	if err := ctx.Err(); err != nil {
		return domain.Record{}, err
	}
	rec, _, _, _ := v.seen()
	return rec, nil
}

func (v *simLagView) Create(ctx context.Context, h domain.Holder) (uint64, error) {
	return v.h.Create(ctx, h)
}

func (v *simLagView) Update(ctx context.Context, h domain.Holder, rev uint64) (uint64, error) {
	return v.h.Update(ctx, h, rev)
}

func (v *simLagView) Delete(ctx context.Context, rev uint64) error { return v.h.Delete(ctx, rev) }

func (v *simLagView) Advertise(ctx context.Context, d time.Duration) (time.Duration, error) {
	return v.h.Advertise(ctx, d)
}

// WaitForChange watches the view: a change shows once the view's lag has
// passed since it was made.
func (v *simLagView) WaitForChange(ctx context.Context, rev uint64, timeout time.Duration) (domain.Record, error) {
	deadline := time.Now().Add(timeout)
	for {
		rec, next, changed, lag := v.seen()
		if rec.Revision != rev || !time.Now().Before(deadline) {
			return rec, nil
		}
		wake := deadline
		if !next.IsZero() && next.Add(lag).Before(wake) {
			wake = next.Add(lag)
		}
		t := time.NewTimer(time.Until(wake))
		select {
		case <-ctx.Done():
			t.Stop()
			return domain.Record{}, ctx.Err()
		case <-t.C:
		case <-changed:
			t.Stop()
		}
	}
}

// simTrace keeps what happened in one run, to print when it fails.
type simTrace struct {
	start time.Time
	mu    sync.Mutex
	lines []string
}

func (tr *simTrace) log(format string, args ...any) {
	line := fmt.Sprintf("%12v  "+format, append([]any{time.Since(tr.start)}, args...)...)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.lines = append(tr.lines, line)
}

func (tr *simTrace) String() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return strings.Join(tr.lines, "\n")
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
