package sqlitedb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"
)

// A WAL file grows with every commit until a checkpoint copies its pages
// into the database. SQLite runs that checkpoint by default inside the
// commit that takes the log past 1,000 pages, so one write in many pays
// for copying and syncing everyone's pages: a third of the time of a
// batch of vector upserts (BenchmarkUpsert). A Checkpointer does it on a
// connection of its own instead, in passive mode, which takes no lock that
// a reader or the writer waits for; writers then leave it alone until the
// log reaches FallbackPages, a bound for a checkpointer that cannot keep
// up (a long reader can hold back the log's reset), where the writer's own
// checkpoint starts again. Nothing is less durable: a commit is in the log
// before it is acknowledged, whoever copies it later.

// FallbackPages is the log size, in pages, at which a commit checkpoints
// itself as SQLite does by default: about 40 MB with 4 KiB pages.
const FallbackPages = 10_000

// CheckpointEvery is how often a Checkpointer copies the log. On a file
// nobody writes, a passive checkpoint reads the log's header and returns.
const CheckpointEvery = 200 * time.Millisecond

// Checkpointer copies a WAL file's log into its database in the background.
type Checkpointer struct {
	db   *sql.DB
	stop context.CancelFunc
	done chan struct{}
	once sync.Once
	err  error
}

// StartCheckpointer opens a connection to the file at path (already in
// WAL) and checkpoints it every period until Close.
func StartCheckpointer(path string, every time.Duration) (*Checkpointer, error) {
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, fmt.Errorf("open %s to checkpoint it: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	ctx, stop := context.WithCancel(context.Background())
	c := &Checkpointer{db: db, stop: stop, done: make(chan struct{})}
	go c.run(ctx, every)
	return c, nil
}

func (c *Checkpointer) run(ctx context.Context, every time.Duration) {
	defer close(c.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// A failed checkpoint leaves the log as it was; the next one,
			// or a writer at FallbackPages, copies it.
			_ = c.Checkpoint(ctx)
		}
	}
}

// Checkpoint copies what it can of the log now, without waiting for
// anyone, and reports an error only if it could not run.
func (c *Checkpointer) Checkpoint(ctx context.Context) error {
	var busy, logged, copied int
	if err := c.db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &logged, &copied); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// Close stops the checkpoints and closes the connection; closing twice is
// harmless.
func (c *Checkpointer) Close() error {
	c.once.Do(func() {
		c.stop()
		<-c.done
		c.err = c.db.Close()
		if errors.Is(c.err, sql.ErrConnDone) {
			c.err = nil
		}
	})
	return c.err
}
