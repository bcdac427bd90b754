package app

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/abi-engine/engine/ports"
)

// Job is periodic work a serving engine does: it runs only while the engine
// holds the lease, and stops first at shutdown. A Run that returns an
// error or panics fails that run only: it is logged, and the job runs
// again on its next period.
type Job struct {
	Name  string
	Every time.Duration
	Run   func(ctx context.Context) error
}

// Jobs runs the registered jobs while the engine serves.
type Jobs struct {
	log *slog.Logger
	// admit is asked before every run, as the kernel asks before every
	// call: the serving loop starts and stops the jobs when it hears of a
	// move of the lease, but a process paused past its lease runs a due
	// job before that news arrives; the lease's own clock says no at once.
	// A run carries the term's fencing token to the stores.
	admit func() (token uint64, ok bool)

	// stopLimit bounds Stop's wait for the runs in progress; 0 waits for
	// them however long they take.
	stopLimit time.Duration

	mu   sync.Mutex
	jobs []Job
	// runs holds, for each job, a place taken while one of its runs is
	// in progress: a run cancelled by Cancel may still go on, and the job
	// started again waits for it rather than run beside it.
	runs   []chan struct{}
	ctx    context.Context // of the running jobs; nil while stopped
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// With a stop limit: stopped is closed when every run has returned
	// after the first Stop, which is to wait no later than stopBy; the
	// runs still going then are logged once (toldStuck).
	stopped   chan struct{}
	stopBy    time.Time
	toldStuck bool
}

// NewJobs returns a job host with no job, whose jobs run when admit says
// so; nil admits every run, with no fencing token.
func NewJobs(log *slog.Logger, admit func() (token uint64, ok bool)) *Jobs {
	if admit == nil {
		admit = func() (uint64, bool) { return 0, true }
	}
	return &Jobs{log: log, admit: admit}
}

// Register adds a job; it starts at once if the jobs run. A job without a
// name, a positive period or a Run, or with the name of a job registered
// already, is refused here, where its module registers it, rather than
// when the engine begins to serve: a name registered twice ran its work
// twice a period, two runs at once, and its log lines could not be told
// apart.
func (j *Jobs) Register(job Job) error {
	if job.Name == "" {
		return fmt.Errorf("a job needs a name (one with a period of %v)", job.Every)
	}
	if job.Every <= 0 || job.Run == nil {
		return fmt.Errorf("job %q: a job needs a period above 0 (it has %v) and a Run", job.Name, job.Every)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, other := range j.jobs {
		if other.Name == job.Name {
			return fmt.Errorf("job %q: a job of that name is registered already", job.Name)
		}
	}
	run := make(chan struct{}, 1)
	j.jobs = append(j.jobs, job)
	j.runs = append(j.runs, run)
	if j.ctx != nil {
		ctx := j.ctx
		j.wg.Go(func() { j.loop(ctx, job, run) })
	}
	return nil
}

// Names lists the registered jobs.
func (j *Jobs) Names() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	names := make([]string, len(j.jobs))
	for i, job := range j.jobs {
		names[i] = job.Name
	}
	return names
}

// Start runs every job on its period; it does nothing if they run, or if
// they stopped for good (Stop).
func (j *Jobs) Start() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.cancel != nil || j.stopped != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	j.ctx, j.cancel = ctx, cancel
	for i, job := range j.jobs {
		run := j.runs[i]
		j.wg.Go(func() { j.loop(ctx, job, run) })
	}
}

func (j *Jobs) loop(ctx context.Context, job Job, inProgress chan struct{}) {
	t := time.NewTicker(job.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// A run from before a Cancel that has not returned yet ends first.
		select {
		case <-ctx.Done():
			return
		case inProgress <- struct{}{}:
		}
		j.once(ctx, job)
		<-inProgress
	}
}

// once runs job once, if its jobs still run and the lease admits it now.
func (j *Jobs) once(ctx context.Context, job Job) {
	// The loop's turn and its cancellation may come at once, and its
	// select takes either: a cancelled job begins no new run, which one
	// that does not heed its context would do in full after the stop or
	// fence that cancelled it.
	if ctx.Err() != nil {
		return
	}
	token, ok := j.admit()
	if !ok {
		return
	}
	run := ctx
	if token != 0 {
		run = ports.WithFencingToken(ctx, token)
	}
	if err := j.run(run, job); err != nil && ctx.Err() == nil {
		j.log.Warn("job failed", "job", job.Name, "err", err)
	}
}

// run runs job once. A panic in it is that run's failure, logged with its
// stack: on the job's own goroutine it would end the engine at once,
// holding the lease, with no release and no drain of the calls received.
func (j *Jobs) run(ctx context.Context, job Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			j.log.Error("job panicked", "job", job.Name, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = nil
		}
	}()
	return job.Run(ctx)
}

// Cancel stops the jobs and cancels the runs in progress without waiting
// for them: a fence must not wait on a run that does not heed its context.
// A job started again runs once its cancelled run has returned.
func (j *Jobs) Cancel() {
	j.mu.Lock()
	cancel := j.cancel
	j.ctx, j.cancel = nil, nil
	j.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// Stop cancels the jobs and waits for every run in progress to return,
// those Cancel left too. With a stop limit, the jobs stop for good: the
// first Stop waits that long at most, and a later one no longer than the
// first; a run still going then is logged by its job's name and left to
// return on its own, and Start does nothing any more.
func (j *Jobs) Stop() {
	j.Cancel()
	if j.stopLimit <= 0 {
		j.wg.Wait()
		return
	}
	j.mu.Lock()
	if j.stopped == nil {
		done := make(chan struct{})
		go func() {
			j.wg.Wait()
			close(done)
		}()
		j.stopped, j.stopBy = done, time.Now().Add(j.stopLimit)
	}
	done, by := j.stopped, j.stopBy
	j.mu.Unlock()
	limit := time.NewTimer(time.Until(by))
	defer limit.Stop()
	select {
	case <-done:
	case <-limit.C:
		j.mu.Lock()
		told := j.toldStuck
		j.toldStuck = true
		j.mu.Unlock()
		if !told {
			j.log.Error("job runs did not return within their time after they were cancelled; stopping without them",
				"jobs", j.inProgress(), "waited", j.stopLimit)
		}
	}
}

// inProgress names the jobs with a run in progress.
func (j *Jobs) inProgress() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	var names []string
	for i, run := range j.runs {
		if len(run) > 0 {
			names = append(names, j.jobs[i].Name)
		}
	}
	return names
}
