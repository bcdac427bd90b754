package domain_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/lease/memory"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/leasetest"
)

var (
	simSeeds = flag.Int("sim.seeds", 2000, "how many seeds the exclusion simulation runs")
	simSeed  = flag.Int64("sim.seed", 0, "replay this one seed of the exclusion simulation (0: run -sim.seeds seeds)")
)

// TestExclusionSimulation runs three engines over one lease store through a
// storm of faults (calls cut off, requests and replies delayed, replies lost,
// writes refused at once, processes paused for more than half a lease, the
// key deleted by a third party) and checks, every fiftieth of a lease, that
// no two engines would accept a call at the same moment. Each engine is
// configured with a lease of one or two L (simLeases), so holders and
// contenders of different leases meet. Each seed draws its own storm; a
// failing seed prints how to replay it.
func TestExclusionSimulation(t *testing.T) {
	seeds := make([]int64, 0, *simSeeds)
	if *simSeed != 0 {
		seeds = append(seeds, *simSeed)
	} else {
		for s := range *simSeeds {
			seeds = append(seeds, int64(s+1))
		}
	}
	var mu sync.Mutex
	var total simStats
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			var st simStats
			synctest.Test(t, func(t *testing.T) { st = simulate(t, seed) })
			if t.Failed() {
				t.Logf("replay: go test ./domain -run 'TestExclusionSimulation/seed=%d$' -sim.seed=%d -v", seed, seed)
			}
			mu.Lock()
			total.add(st)
			mu.Unlock()
		})
	}
	t.Cleanup(func() {
		t.Logf("%d seeds: %d checks, %d calls accepted, %d faults, %d engine starts", len(seeds), total.checks, total.accepted, total.faults, total.starts)
	})
}

type simStats struct{ checks, accepted, faults, starts int }

func (s *simStats) add(o simStats) {
	s.checks += o.checks
	s.accepted += o.accepted
	s.faults += o.faults
	s.starts += o.starts
}

// slot is one host: engine processes start on it one after another, and the
// network faults between it and the store belong to it.
type slot struct {
	name  string
	store *leasetest.Faulty

	mu          sync.Mutex
	current     *domain.Ownership
	pausedUntil time.Time
}

func (s *slot) engine() (*domain.Ownership, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current, time.Now().Before(s.pausedUntil)
}

func (s *slot) set(o *domain.Ownership) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.current = o
}

const (
	simEngines    = 3
	simFaultPhase = 30 * L
	// simQuiet follows the last fault: its effects last up to 3 leases, and
	// then a lease-and-a-half of silence and a standby's takeover at most,
	// of the longest lease an engine runs on.
	simQuiet = 8 * simLongest
	// simLongest is the longest of simLeases.
	simLongest = 2 * L
)

// simLeases are the leases an engine may be configured with: an account's
// engines need not share one (a deploy changes lease_seconds; a command
// runs on the default beside an engine configured otherwise).
var simLeases = []time.Duration{L, simLongest}

func simulate(t *testing.T, seed int64) simStats {
	var st simStats
	var stMu sync.Mutex
	count := func(f func(*simStats)) {
		stMu.Lock()
		defer stMu.Unlock()
		f(&st)
	}
	store := memory.New()
	start := time.Now()
	log := &simTrace{start: start}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup

	slots := make([]*slot, simEngines)
	for i := range slots {
		slots[i] = &slot{name: fmt.Sprintf("e%d", i), store: leasetest.Wrap(store)}
	}
	for i, s := range slots {
		rng := rand.New(rand.NewPCG(uint64(seed), uint64(i+1)))
		wg.Go(func() { runSlot(ctx, t, s, rng, log, func() { count(func(st *simStats) { st.starts++ }) }) })
	}
	faultRng := rand.New(rand.NewPCG(uint64(seed), 0))
	wg.Go(func() {
		for {
			time.Sleep(time.Duration(faultRng.Int64N(int64(3*L/2))) + L/2)
			if time.Since(start) >= simFaultPhase {
				return
			}
			log.log("fault: %s", injectFault(faultRng, store, slots))
			count(func(st *simStats) { st.faults++ })
		}
	})

	var violations []string
	for time.Since(start) < simFaultPhase+simQuiet {
		time.Sleep(L / 50)
		var serving []string
		for _, s := range slots {
			o, paused := s.engine()
			if o != nil && !paused && o.MayServe() {
				serving = append(serving, s.name+" "+o.Me().InstanceID[:8])
			}
		}
		count(func(st *simStats) { st.checks++; st.accepted += len(serving) })
		if len(serving) > 1 {
			log.log("VIOLATION: %s all accept calls", strings.Join(serving, ", "))
			violations = append(violations, fmt.Sprintf("at %v: %s all accept calls", time.Since(start), strings.Join(serving, ", ")))
		}
	}
	var servingAtEnd int
	var endStates []string
	for _, s := range slots {
		o, _ := s.engine()
		if o == nil {
			endStates = append(endStates, s.name+" between engines")
			continue
		}
		if o.MayServe() {
			servingAtEnd++
		}
		endStates = append(endStates, fmt.Sprintf("%s %s rollout %q", s.name, o.State(), o.Me().RolloutID))
	}
	if rec, err := store.Read(context.Background()); err == nil {
		endStates = append(endStates, fmt.Sprintf("lease %+v", rec))
	}
	stop()
	wg.Wait()

	for i, v := range violations {
		if i == 5 {
			t.Errorf("... and %d more", len(violations)-5)
			break
		}
		t.Errorf("two engines serve at once %s", v)
	}
	if servingAtEnd != 1 {
		t.Errorf("%v after the last fault, %d engines serve, want 1: %s", simQuiet, servingAtEnd, endStates)
	}
	if st.accepted == 0 {
		t.Errorf("no engine ever accepted a call")
	}
	if t.Failed() || *simSeed != 0 {
		t.Logf("what happened:\n%s", log)
	}
	return st
}

// runSlot starts engines on one host, one after another, until ctx ends: a
// random release each, claiming as a same-release replica or as a new
// release, serving until the lease is lost or a random deploy restarts it.
func runSlot(ctx context.Context, t *testing.T, s *slot, rng *rand.Rand, log *simTrace, started func()) {
	rollouts := []string{"", "v1", "v2"}
	for ctx.Err() == nil {
		me := domain.ThisProcess("sim", rollouts[rng.IntN(len(rollouts))])
		me.Host = s.name
		timing := domain.Timing{Lease: simLeases[rng.IntN(len(simLeases))], StandbyTimeout: 20 * L}
		name := fmt.Sprintf("%s %s %s lease %v", s.name, me.InstanceID[:8], me.RolloutID, timing.Lease)
		opts := []domain.Option{domain.WithLogger(slog.New(slog.DiscardHandler)),
			domain.WithObserver(func(tr domain.Transition) {
				log.log("%s: %s at revision %d", name, tr, tr.Record.Revision)
			})}
		if rng.IntN(3) == 0 {
			name += " (hot standby)"
			opts = append(opts, domain.WithHotStandby())
		}
		o, err := domain.NewOwnership(s.store, me, timing, opts...)
		if err != nil {
			t.Errorf("NewOwnership: %v", err)
			return
		}
		started()
		s.set(o)
		serveEngine(ctx, o, rng, log.start)
		s.set(nil)
		_ = o.Release(context.Background())
		sleepCtx(ctx, time.Duration(rng.Int64N(int64(L))))
	}
}

// serveEngine runs one engine from claim to its end.
func serveEngine(ctx context.Context, o *domain.Ownership, rng *rand.Rand, start time.Time) {
	out, err := o.Claim(ctx, domain.RoleServe)
	if err != nil {
		return
	}
	if out == domain.OutcomeStandby {
		if err := o.AwaitLease(ctx); err != nil {
			return
		}
	}
	// Engines redeploy at random during the faults, never in the quiet end.
	restart := time.Duration(rng.Int64N(int64(12*L))) + 3*L
	if time.Since(start)+restart > simFaultPhase {
		restart = simFaultPhase + simQuiet + L
	}
	t := time.NewTimer(restart)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-o.Lost():
	case <-t.C:
	}
}

// injectFault draws one fault and says what it did.
func injectFault(rng *rand.Rand, store *memory.Lease, slots []*slot) string {
	s := slots[rng.IntN(len(slots))]
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	switch rng.IntN(6) {
	case 0:
		d := between(L/5, 2*L)
		s.store.Cut(true)
		time.AfterFunc(d, func() { s.store.Cut(false) })
		return fmt.Sprintf("%s cut off for %v", s.name, d)
	case 1:
		req, reply, d := between(0, L/3), between(0, L/3), between(L, 3*L)
		s.store.Delay(req, reply)
		time.AfterFunc(d, func() { s.store.Delay(0, 0) })
		return fmt.Sprintf("%s requests delayed %v, replies %v, for %v", s.name, req, reply, d)
	case 2:
		n := 1 + rng.IntN(2)
		s.store.LoseReplies(n)
		return fmt.Sprintf("%s loses its next %d replies", s.name, n)
	case 3:
		d := between(6*L/10, 3*L/2)
		s.store.Pause(d)
		s.mu.Lock()
		s.pausedUntil = time.Now().Add(d)
		s.mu.Unlock()
		return fmt.Sprintf("%s paused for %v", s.name, d)
	case 4:
		n := 1 + rng.IntN(3)
		s.store.RefuseWrites(n)
		return fmt.Sprintf("%s has its next %d writes refused", s.name, n)
	default:
		rec, err := store.Read(context.Background())
		if err == nil && rec.Present {
			err = store.Delete(context.Background(), rec.Revision)
		}
		return fmt.Sprintf("the key deleted by a third party at revision %d (%v)", rec.Revision, err)
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
