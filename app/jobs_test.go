package app

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/abi-engine/engine/internal/logbuf"
	"github.com/abi-engine/engine/ports"
)

// A job that falls due while the lease's clock says the engine may not
// serve does not run, even though the jobs were started and nobody has
// stopped them yet: a process paused past its lease wakes with its tickers
// due before the fence reaches the serving loop. A run that is admitted
// carries the fencing token of its term to the stores.
func TestAJobRunsOnlyWhenTheLeaseAdmitsItAndCarriesItsToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			token atomic.Uint64
			may   atomic.Bool
		)
		jobs := NewJobs(slog.New(slog.DiscardHandler), func() (uint64, bool) { return token.Load(), may.Load() })
		var (
			mu   sync.Mutex
			runs []uint64 // the token each run carried; 0 for none
		)
		jobs.Register(Job{Name: "sweep", Every: time.Second, Run: func(ctx context.Context) error {
			got, _ := ports.FencingToken(ctx)
			mu.Lock()
			runs = append(runs, got)
			mu.Unlock()
			return nil
		}})
		jobs.Start()
		defer jobs.Stop()

		tick := func() {
			time.Sleep(time.Second)
			synctest.Wait()
		}
		token.Store(7)
		may.Store(true)
		tick()
		may.Store(false) // the clock ran out; the fence has not arrived
		tick()
		tick()
		token.Store(9)
		may.Store(true) // a new term
		tick()

		mu.Lock()
		defer mu.Unlock()
		if want := []uint64{7, 9}; !slices.Equal(runs, want) {
			t.Fatalf("runs carried tokens %v, want %v (none while the lease said no)", runs, want)
		}
	})
}

// With no admission, as in an engine without a lease, every run goes ahead
// without a token.
func TestJobsWithoutAdmissionRunWithoutAToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		jobs := NewJobs(slog.New(slog.DiscardHandler), nil)
		var runs, tokens atomic.Int32
		jobs.Register(Job{Name: "sweep", Every: time.Second, Run: func(ctx context.Context) error {
			runs.Add(1)
			if _, ok := ports.FencingToken(ctx); ok {
				tokens.Add(1)
			}
			return nil
		}})
		jobs.Start()
		defer jobs.Stop()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if runs.Load() != 2 || tokens.Load() != 0 {
			t.Fatalf("%d runs, %d with a token; want 2 runs, none with a token", runs.Load(), tokens.Load())
		}
	})
}

// A job without a positive period or a Run is refused where its module
// registers it, so the module's start fails and says why. Taken, it would
// panic the engine when the jobs start, which is when the engine begins to
// serve: for a standby, the moment it takes over.
func TestAJobWithoutAPeriodOrARunIsRefusedWhereItIsRegistered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		jobs := NewJobs(slog.New(slog.DiscardHandler), nil)
		jobs.Start()
		defer jobs.Stop()
		nop := func(context.Context) error { return nil }
		for _, job := range []Job{
			{Name: "no period", Run: nop},
			{Name: "a period below 0", Every: -time.Second, Run: nop},
			{Name: "no run", Every: time.Second},
		} {
			if err := jobs.Register(job); err == nil {
				t.Errorf("the job %q was registered", job.Name)
			}
		}
		time.Sleep(time.Minute) // fake time: any ticker the jobs started fires
		synctest.Wait()
		if names := jobs.Names(); len(names) != 0 {
			t.Fatalf("jobs registered: %v", names)
		}
		if err := jobs.Register(Job{Name: "sweep", Every: time.Second, Run: nop}); err != nil {
			t.Fatalf("a job with a period and a Run: %v", err)
		}
	})
}

// A module's job that panics is a failed run: it is logged, with the
// panic, and the job and the others run on. The panic ran on the job's own
// goroutine, so it ended the whole engine at once, holding the lease
// without releasing it: the calls in progress were lost, and no engine
// served for a whole lease.
func TestAJobThatPanicsIsLoggedAndTheJobsRunOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out logbuf.Buffer
		log := slog.New(slog.NewTextHandler(&out, nil))
		jobs := NewJobs(log, nil)
		var panicky, steady atomic.Int32
		nop := func(context.Context) error { steady.Add(1); return nil }
		if err := jobs.Register(Job{Name: "index", Every: time.Second, Run: func(context.Context) error {
			if panicky.Add(1) == 1 {
				panic("index out of range")
			}
			return nil
		}}); err != nil {
			t.Fatal(err)
		}
		if err := jobs.Register(Job{Name: "sweep", Every: time.Second, Run: nop}); err != nil {
			t.Fatal(err)
		}
		jobs.Start()
		defer jobs.Stop()
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if panicky.Load() != 3 || steady.Load() != 3 {
			t.Fatalf("after a panic in its first run, the job ran %d times and the other %d; want 3 each", panicky.Load(), steady.Load())
		}
		if s := out.String(); !strings.Contains(s, "level=ERROR") || !strings.Contains(s, "job=index") || !strings.Contains(s, "index out of range") {
			t.Fatalf("the panic is not logged as an error of the job:\n%s", s)
		}
	})
}

// A job without a name, or named as a job registered already, is refused
// where it is registered, naming it, and the job registered first runs
// alone. Before, both were taken: the work ran twice a period, two runs at
// once, and the log could not tell them apart.
func TestAJobWithoutANameOrWithANameTakenIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		jobs := NewJobs(slog.New(slog.DiscardHandler), nil)
		var runs atomic.Int32
		count := func(context.Context) error { runs.Add(1); return nil }
		if err := jobs.Register(Job{Name: "sweep", Every: time.Second, Run: count}); err != nil {
			t.Fatal(err)
		}
		jobs.Start()
		defer jobs.Stop()
		if err := jobs.Register(Job{Name: "sweep", Every: time.Second, Run: count}); err == nil ||
			!strings.Contains(err.Error(), `job "sweep": a job of that name is registered already`) {
			t.Fatalf("a second job named sweep: %v, want it refused", err)
		}
		if err := jobs.Register(Job{Every: time.Second, Run: count}); err == nil || !strings.Contains(err.Error(), "a job needs a name") {
			t.Fatalf("a job without a name: %v, want it refused", err)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if n := runs.Load(); n != 3 {
			t.Fatalf("%d runs in three periods, want 3", n)
		}
		if names := jobs.Names(); !slices.Equal(names, []string{"sweep"}) {
			t.Fatalf("jobs registered: %q", names)
		}
	})
}

// A job whose run is due when its jobs are cancelled begins no new run,
// even when its turn comes at the very moment of the cancellation: here
// the turn a stuck run from before a fence gives up once the jobs, started
// again at a restore, are cancelled by a stop. Before, the job's loop chose
// at random between its cancellation and its turn, and half the time began
// a run with a context already cancelled, new work after the stop, which a
// run that does not heed its context did in full, and the stop waited for.
func TestACancelledJobBeginsNoNewRun(t *testing.T) {
	for range 20 {
		synctest.Test(t, func(t *testing.T) {
			jobs := NewJobs(slog.New(slog.DiscardHandler), nil)
			unstick := make(chan struct{})
			var runs, late atomic.Int32
			if err := jobs.Register(Job{Name: "stuck", Every: time.Second, Run: func(ctx context.Context) error {
				if ctx.Err() != nil {
					late.Add(1)
				}
				if runs.Add(1) == 1 {
					<-unstick // heeds no context
				}
				return nil
			}}); err != nil {
				t.Fatal(err)
			}
			jobs.Start()
			time.Sleep(time.Second)
			synctest.Wait()
			jobs.Cancel() // a fence: the first run goes on
			jobs.Start()  // a restore: the job's turn waits for that run
			time.Sleep(time.Second)
			synctest.Wait()
			jobs.Cancel() // the stop
			close(unstick)
			jobs.Stop()
			if n := late.Load(); n != 0 {
				t.Fatalf("%d runs began after their jobs were cancelled (%d runs in all)", n, runs.Load())
			}
		})
	}
}
