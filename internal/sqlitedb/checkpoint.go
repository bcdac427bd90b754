package sqlitedb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
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
	path string
	log  *slog.Logger
	stop context.CancelFunc
	done chan struct{}
	once sync.Once
	err  error

	// fault runs on the driver's connection before each checkpoint; nil
	// outside tests, which make it panic as a driver fault would.
	fault func(conn any)
}

// StartCheckpointer opens a connection to the file at path (already in
// WAL) and checkpoints it every period until Close. log hears of
// checkpoints that panicked; nil means slog.Default().
func StartCheckpointer(path string, every time.Duration, log *slog.Logger) (*Checkpointer, error) {
	if log == nil {
		log = slog.Default()
	}
	return startCheckpointer(path, every, log, nil)
}

func startCheckpointer(path string, every time.Duration, log *slog.Logger, fault func(conn any)) (*Checkpointer, error) {
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, fmt.Errorf("open %s to checkpoint it: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	ctx, stop := context.WithCancel(context.Background())
	c := &Checkpointer{db: db, path: path, log: log, stop: stop, done: make(chan struct{}), fault: fault}
	go c.run(ctx, every)
	return c, nil
}

func (c *Checkpointer) run(ctx context.Context, every time.Duration) {
	defer close(c.done)
	t := time.NewTicker(every)
	defer t.Stop()
	panics := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// A failed checkpoint leaves the log as it was; the next one,
			// or a writer at FallbackPages, copies it.
			if !c.tick(ctx) {
				panics = 0
				continue
			}
			if panics++; panics == maxPanics {
				c.log.Error("checkpoints of a SQLite log panicked each time; the log is no longer checkpointed in the background, and commits checkpoint it themselves past FallbackPages",
					"path", c.path, "panics", panics, "fallback_pages", FallbackPages)
				return
			}
		}
	}
}

// maxPanics is how many checkpoints in a row may panic before the
// Checkpointer stops: a fault that comes back on every new connection
// would log a stack five times a second for good, while the writers'
// own checkpoints at FallbackPages keep the log bounded without it.
const maxPanics = 3

// tick runs one checkpoint of the loop and reports whether it panicked.
// This goroutine is the process's own, where a panic (a fault in the
// driver) would end the process, and with it an engine holding the lease,
// with no release and no drain. The panic is logged with its stack
// instead; the connection it happened on has been dropped (Checkpoint),
// with whatever locks it held on the log, and the next tick checkpoints on
// a new one. A checkpoint only copies committed pages, so one cut short
// loses nothing.
func (c *Checkpointer) tick(ctx context.Context) (panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			panicked = true
			c.log.Error("a checkpoint of a SQLite log panicked; its connection is dropped and the next checkpoint opens another",
				"path", c.path, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	_ = c.Checkpoint(ctx)
	return false
}

// Checkpoint copies what it can of the log now, without waiting for
// anyone, and reports an error only if it could not run. It runs on the
// driver's connection itself (sql.Conn.Raw), so that a panic there
// drops that connection, where database/sql would keep it out of the pool,
// open and holding its locks, and the next checkpoint would wait for it.
func (c *Checkpointer) Checkpoint(ctx context.Context) error {
	conn, err := c.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error {
		if c.fault != nil {
			c.fault(dc)
		}
		ex, ok := dc.(driver.ExecerContext)
		if !ok {
			return fmt.Errorf("the driver's connection %T runs no statement", dc)
		}
		_, err := ex.ExecContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)", nil)
		return err
	})
	if err != nil {
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
