package app

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Job is periodic work a serving engine does: it runs only while the engine
// holds the lease, and stops first at shutdown.
type Job struct {
	Name  string
	Every time.Duration
	Run   func(ctx context.Context) error
}

// Jobs runs the registered jobs while the engine serves.
type Jobs struct {
	log *slog.Logger

	mu     sync.Mutex
	jobs   []Job
	ctx    context.Context // of the running jobs; nil while stopped
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewJobs returns a job host with no job.
func NewJobs(log *slog.Logger) *Jobs { return &Jobs{log: log} }

// Register adds a job; it starts at once if the jobs run.
func (j *Jobs) Register(job Job) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.jobs = append(j.jobs, job)
	if j.ctx != nil {
		ctx := j.ctx
		j.wg.Go(func() { j.loop(ctx, job) })
	}
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

// Start runs every job on its period; it does nothing if they run.
func (j *Jobs) Start() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	j.ctx, j.cancel = ctx, cancel
	for _, job := range j.jobs {
		j.wg.Go(func() { j.loop(ctx, job) })
	}
}

func (j *Jobs) loop(ctx context.Context, job Job) {
	t := time.NewTicker(job.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := job.Run(ctx); err != nil && ctx.Err() == nil {
				j.log.Warn("job failed", "job", job.Name, "err", err)
			}
		}
	}
}

// Stop cancels the jobs and waits for the runs in progress to return.
func (j *Jobs) Stop() {
	j.mu.Lock()
	cancel := j.cancel
	j.ctx, j.cancel = nil, nil
	j.mu.Unlock()
	if cancel != nil {
		cancel()
		j.wg.Wait()
	}
}
