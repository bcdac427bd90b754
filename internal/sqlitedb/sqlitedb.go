// Package sqlitedb opens the SQLite files of the local storage adapters the
// same way, so that several handles on one file, in one process or many,
// wait for each other instead of failing with "database is locked".
package sqlitedb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/abi-engine/engine/ports"
)

// writerOptions apply to the writer's connection: SQLite's busy handler
// waits one try (LockTry) for the lock, which another handle on the file
// may hold, and a write tries again while its wait allows (Wait), the file
// is in WAL so readers never block it, and transactions take the write
// lock when they begin, so a read-then-write transaction cannot lose its
// snapshot half way.
const writerOptions = "?_pragma=busy_timeout(50)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"

// BusyTimeout is how long a write waits for the file's lock, which another
// handle on the file holds, when its call is due no sooner.
const BusyTimeout = 10 * time.Second

// LockTry is how long SQLite's busy handler waits for the file's lock in
// one try of a write (writerOptions). SQLite counts a busy timeout in the
// sleeps it schedules, not in time passed, and on a loaded host each sleep
// wakes late: a busy timeout of 8.9 s has ended after 10.06 s. A try is
// short enough that its lateness stays small, and a write's wait, made of
// tries, is bounded by the clock (Wait.Again).
const LockTry = 50 * time.Millisecond

// readerOptions apply to the readers: query_only makes a write sent to the
// wrong pool fail at once instead of racing the writer for the lock.
const readerOptions = "?_pragma=busy_timeout(10000)&_pragma=query_only(1)"

// Readers is how many read connections a handle keeps open. Each reader
// holds a prepared copy of every statement it ran and a page cache, so the
// pool is bounded and stays open; more readers than cores only queue in
// the pure Go driver.
func Readers() int { return max(4, runtime.GOMAXPROCS(0)) }

// DB is one handle on a file: one writer connection, through which every
// write goes in turn, as SQLite would serialise them anyway (contending
// writers would only spin on the busy handler), and a bounded pool of
// reader connections, which WAL lets read beside the writer. A read on a
// reader sees every write committed before it began.
type DB struct {
	Write *sql.DB
	Read  *sql.DB

	turn chan struct{} // holds a token while a write has the writer (WriteTurn)
	// wait is the wait for the file's lock of the write that has the
	// turn; only that write sets and reads it (WriteTurn, Again).
	wait Wait
	// busy is the writer's busy timeout, in milliseconds, as last set: a
	// try (LockTry), or less for a write due sooner; only a write that has
	// the turn sets it. A connection the writer opens, as when
	// database/sql replaces one its driver called bad, is given it
	// (writerConnector).
	busy atomic.Int64
	// now reads the clock a write's wait is bounded by: time.Now, or a
	// test's.
	now func() time.Time
}

// writerConnector opens the writer's connections, each waiting for the
// lock as the last write set (DB.busy) rather than as its options say.
type writerConnector struct {
	driver.Connector
	busy *atomic.Int64
}

func (c writerConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	if ms := c.busy.Load(); ms != LockTry.Milliseconds() {
		if err := setBusyTimeout(ctx, conn, ms); err != nil {
			_ = conn.Close()
			return nil, err
		}
	}
	return conn, nil
}

// setBusyTimeout sets how long conn, a driver's connection, waits for the
// file's lock.
func setBusyTimeout(ctx context.Context, conn driver.Conn, ms int64) error {
	ex, ok := conn.(driver.ExecerContext)
	if !ok {
		return fmt.Errorf("set a new writer connection's wait for the lock: the driver's connection %T runs no statement", conn)
	}
	if _, err := ex.ExecContext(ctx, "PRAGMA busy_timeout = "+strconv.FormatInt(ms, 10), nil); err != nil {
		return fmt.Errorf("set a new writer connection's wait for the lock to %d ms: %w", ms, err)
	}
	return nil
}

// Open opens the file at path, creating it and its directory if missing,
// and runs schema, which must be idempotent. Opened under a serving
// engine's account (ports.WithAccount), the file must belong to that
// account, or come to (Belong). what names the adapter in
// errors, such as "keyvalue sqlite". A path holding a "?" is refused with
// ErrInvalidArgument, as the vector store's is.
func Open(ctx context.Context, what, path, schema string) (*DB, error) {
	if path == "" {
		return nil, fmt.Errorf("%s: path is empty: %w", what, ports.ErrInvalidArgument)
	}
	if strings.Contains(path, "?") {
		// The driver reads what follows the first "?" as options: it would
		// open the file named by what comes before, and lose the options.
		return nil, fmt.Errorf("%s: path %q holds a \"?\", which SQLite would read as the start of options: %w", what, path, ports.ErrInvalidArgument)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("%s: create the directory of %s: %w", what, path, err)
	}
	d := &DB{turn: make(chan struct{}, 1), now: time.Now}
	d.busy.Store(LockTry.Milliseconds())
	wc, err := sqlite.NewConnector(path + writerOptions)
	if err != nil {
		return nil, fmt.Errorf("%s: open %s: %w", what, path, err)
	}
	w := sql.OpenDB(writerConnector{Connector: wc, busy: &d.busy})
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	// A file of another account is refused before its tables are touched.
	if err := Belong(ctx, w, what, path); err != nil {
		_ = w.Close()
		return nil, err
	}
	// The schema runs first, on the writer, so the file is in WAL before
	// a reader opens it. Its statements are idempotent: one refused for
	// the lock runs again, with those before it.
	wait := WaitFor(ctx)
	_, err = w.ExecContext(ctx, schema)
	for wait.Again(err) {
		_, err = w.ExecContext(ctx, schema)
	}
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("%s: create tables in %s: %w", what, path, err)
	}
	r, err := sql.Open("sqlite", path+readerOptions)
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("%s: open %s for reading: %w", what, path, err)
	}
	r.SetMaxOpenConns(Readers())
	r.SetMaxIdleConns(Readers())
	d.Write, d.Read = w, r
	return d, nil
}

// Full marks err, a write's, as ports.ErrStorageFull when SQLite had no
// room for it (SQLITE_FULL: the disk, or a page limit): SQLite then rolls
// the statement or its transaction back, so nothing was written. Any other
// error is returned as it is.
func Full(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_FULL {
		return fmt.Errorf("%w: %w", ports.ErrStorageFull, err)
	}
	return err
}

// NotDone marks err, a write's, as ports.ErrNotDone when SQLite refused
// one of its statements for a lock: SQLITE_BUSY, another connection held
// the file's write lock for as long as the write waited for it (another
// engine on this host; Wait), or SQLITE_LOCKED, a conflict within the connection. SQLite ran
// none of that statement, and a write made in a transaction rolls it back
// (RollBack), so nothing of the write is in the file, and the lock may be
// free when it is sent again. It marks so too a statement that found the
// handle closed: database/sql says so only before it takes a connection
// from the pool, so the statement never reached SQLite. Any other error is
// returned as it is.
//
// It is for errors from before COMMIT. A failed COMMIT is never called
// not done: the driver rolls back what COMMIT left open without saying
// whether that worked, and a COMMIT that failed writing or syncing the log
// may have left the transaction in it.
func NotDone(err error) error {
	if errors.Is(err, errClosed) {
		return fmt.Errorf("%w: %w", ports.ErrNotDone, err)
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return fmt.Errorf("%w: %w", ports.ErrNotDone, err)
		}
	}
	return err
}

// errClosed is the error database/sql gives a call on a closed pool
// before it takes a connection, which the package does not export: it is
// asked of a pool closed at once.
var errClosed = func() error {
	db := sql.OpenDB(noConnector{})
	_ = db.Close()
	_, err := db.Conn(context.Background())
	return err
}()

// noConnector is the connector of the pool errClosed comes from, which
// never connects.
type noConnector struct{}

func (noConnector) Connect(context.Context) (driver.Conn, error) {
	return nil, errors.New("sqlitedb: no connection")
}

func (noConnector) Driver() driver.Driver { return nil }

// RollBack rolls tx, begun on conn, back after err, the error of a
// statement of it, and returns err, marked as NotDone would mark it. A
// failed rollback may leave the transaction open on conn, holding the
// file's write lock: kept, conn would fail every later BEGIN of the
// handle, keep other engines' writes out, and might make the write at a
// later COMMIT. conn is then dropped (Drop), and the write's error is never
// not done. A transaction database/sql already ended, for its context
// ended (sql.ErrTxDone), has left conn.
func RollBack(conn *sql.Conn, tx *sql.Tx, err error) error {
	if rerr := tx.Rollback(); rerr != nil {
		if !errors.Is(rerr, sql.ErrTxDone) {
			Drop(conn)
		}
		return fmt.Errorf("%w (and its rollback failed: %v)", err, rerr)
	}
	return NotDone(err)
}

// Commit commits tx, begun on conn. When COMMIT fails, the driver rolls
// back what it left open but does not say whether that rollback worked; a
// transaction left open would hold the file's write lock on conn, as after
// a failed rollback (RollBack). conn is then asked: a deferred BEGIN, which
// takes no lock, is refused only inside a transaction, and is rolled back
// at once. If either fails, conn is dropped (Drop); if not, it is kept,
// with what was set on it (its wait for the lock, a page limit). The
// COMMIT's error is returned as it is.
func Commit(ctx context.Context, conn *sql.Conn, tx *sql.Tx) error {
	err := tx.Commit()
	if err == nil || errors.Is(err, sql.ErrTxDone) {
		return err
	}
	ctx = context.WithoutCancel(ctx)
	if _, berr := conn.ExecContext(ctx, "BEGIN DEFERRED"); berr != nil {
		Drop(conn)
	} else if _, rerr := conn.ExecContext(ctx, "ROLLBACK"); rerr != nil {
		Drop(conn)
	}
	return err
}

// Drop closes conn rather than give it back to its pool, which opens a
// new connection for the next call that needs one. Closing a connection
// ends the transaction it was in.
func Drop(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
}

// Close closes both pools; closing twice is harmless.
func (d *DB) Close() error {
	return errors.Join(d.Read.Close(), d.Write.Close())
}

// PointRead is the context a point read (one row by its key) runs under:
// ctx's values without its cancellation, once ctx is checked. Such a read
// on a WAL reader takes microseconds and waits for no lock, so stopping it
// half way gains nothing, while a cancellable context costs each query
// two goroutines (database/sql's and the driver's, which watch it to
// interrupt the statement) and a progress handler: under 64 callers that
// made a read several times slower. Writes wait for their turn under their
// context (WriteTurn).
func PointRead(ctx context.Context) (context.Context, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return context.WithoutCancel(ctx), nil
}

// WriteTurn waits for the handle's turn to write (TakeTurn), and returns
// the context the write's statements then run under, ctx's values without
// its cancellation, and the function that ends the turn.
//
// Writes queue here, under their own contexts, rather than in the writer
// pool: a write whose caller gave up, or whose engine was fenced, leaves the
// queue at once. Once its turn comes, a statement of one row takes
// microseconds, while a cancellable context would cost it two goroutines
// (database/sql's and the driver's, which watch it to interrupt the
// statement) and a progress handler: under 64 writers that took about a
// sixth of a set's throughput. What a write can no longer stop is a wait for
// the file's lock held by another process. Only another engine on this
// host takes it, and the fence check inside each write refuses the write if
// that engine's term is newer. That wait is made of tries (LockTry), each
// refused statement tried again while the write's wait allows (DB.Again),
// which ends by ctx's deadline, or by the moment its answer is due
// (ports.AnswerBy), when either comes sooner than BusyTimeout (WaitFor):
// the write's last refusal for the lock (SQLITE_BUSY), which NotDone marks,
// then reaches the caller while it still waits, and it learns the write was
// not done and may send it again, where past its own deadline it would
// learn nothing (a timeout, 504, through another engine). A write whose
// try could not be set (the handle closed, or a connection that could not
// be opened) ran none of its statements: it is ports.ErrNotDone.
func (d *DB) WriteTurn(ctx context.Context) (context.Context, func(), error) {
	if err := TakeTurn(ctx, d.turn); err != nil {
		return nil, nil, err
	}
	wctx := context.WithoutCancel(ctx)
	d.wait = waitFor(ctx, d.now)
	if err := d.tryFor(wctx, d.wait.Try()); err != nil {
		d.endTurn()
		return nil, nil, fmt.Errorf("%w: %w", ports.ErrNotDone, err)
	}
	return wctx, d.endTurn, nil
}

// tryFor sets the writer's busy timeout to try, unless it stands there.
// Only a write that has the turn calls it; most find it at LockTry.
func (d *DB) tryFor(ctx context.Context, try time.Duration) error {
	ms := try.Milliseconds()
	if ms == d.busy.Load() {
		return nil
	}
	if _, err := d.Write.ExecContext(ctx, "PRAGMA busy_timeout = "+strconv.FormatInt(ms, 10)); err != nil {
		return fmt.Errorf("set the writer's wait for the lock to %v: %w", try, err)
	}
	d.busy.Store(ms)
	return nil
}

// Again reports whether the write that has the turn tries again a
// statement that failed with err (Wait.Again).
func (d *DB) Again(err error) bool { return err != nil && d.wait.Again(err) }

// Wait is the wait for the file's lock of the write that has the turn.
func (d *DB) Wait() Wait { return d.wait }

// TakeTurn waits for a handle's turn to write, by putting a token in turn,
// a channel of one slot that holds it while a write of the handle runs:
// until ctx ends, and, for a call due sooner than BusyTimeout, no longer
// than it would wait for the file's lock (LockWait), so that a write queued
// behind one that waits for the lock is told in time, as that one is, that
// it was not done. A write that never had its turn wrote nothing: its
// error is ports.ErrNotDone, with ctx's error when ctx ended.
func TakeTurn(ctx context.Context, turn chan<- struct{}) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("wait for the handle's turn to write: %w: %w", ports.ErrNotDone, err)
	}
	select {
	case turn <- struct{}{}:
		return nil
	default:
	}
	var due <-chan time.Time
	if wait := LockWait(ctx); wait < BusyTimeout {
		t := time.NewTimer(wait)
		defer t.Stop()
		due = t.C
	}
	select {
	case turn <- struct{}{}:
		return nil
	case <-due:
		return fmt.Errorf("wait for the handle's turn to write: the call's answer is due: %w", ports.ErrNotDone)
	case <-ctx.Done():
		return fmt.Errorf("wait for the handle's turn to write: %w: %w", ports.ErrNotDone, ctx.Err())
	}
}

// LockWait is how long a write of a call under ctx may wait for the file's
// lock now: BusyTimeout, or until ctx's deadline or the moment its answer
// is due (ports.AnswerBy) if sooner, and none once that has passed.
func LockWait(ctx context.Context) time.Duration {
	return max(0, time.Until(waitFor(ctx, time.Now).by))
}

// A Wait is a write's wait for the file's lock, bounded by the clock: the
// write tries a statement refused for the lock again (Again) while a try
// begun now would end by the moment the wait ends. SQLite's own busy
// timeout is not that bound: it ends once the sleeps it scheduled add up
// to it, however late each woke.
type Wait struct {
	by  time.Time
	try time.Duration // one try: LockTry, or what is left of the wait if less
	now func() time.Time
}

// WaitFor is the wait of a write of a call under ctx, from now: until
// BusyTimeout has passed, or ctx's deadline or the moment the call's answer
// is due (ports.AnswerBy) if sooner.
func WaitFor(ctx context.Context) Wait { return waitFor(ctx, time.Now) }

// waitFor is WaitFor on the clock now.
func waitFor(ctx context.Context, now func() time.Time) Wait {
	at := now()
	by := at.Add(BusyTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(by) {
		by = dl
	}
	if due, ok := ports.AnswerBy(ctx); ok && due.Before(by) {
		by = due
	}
	return Wait{by: by, try: min(LockTry, max(0, by.Sub(at)).Truncate(time.Millisecond)), now: now}
}

// Try is how long the first try of a write under w waits for the lock, the
// busy timeout its connection is set to: LockTry, or what is left of w as
// it begins if less, so that a write due at once does not wait.
func (w Wait) Try() time.Duration { return w.try }

// Again reports whether a statement that failed with err, one that takes
// the file's lock on a connection whose busy timeout is w's try (Try), is
// tried again: SQLite refused it for the lock (SQLITE_BUSY), so none of it
// ran, and another try, begun now, ends by the wait's end on its clock.
// The zero Wait tries no statement again.
func (w Wait) Again(err error) bool {
	var se *sqlite.Error
	if w.now == nil || !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY {
		return false
	}
	return !w.now().Add(w.try).After(w.by)
}

// Begin begins a transaction on conn, which takes the file's write lock as
// it begins, trying again while w allows.
func (w Wait) Begin(ctx context.Context, conn *sql.Conn) (*sql.Tx, error) {
	tx, err := conn.BeginTx(ctx, nil)
	for err != nil && w.Again(err) {
		tx, err = conn.BeginTx(ctx, nil)
	}
	return tx, err
}

func (d *DB) endTurn() { <-d.turn }

// Prepare prepares each query on db, in order, and returns the statements.
// database/sql prepares a statement again on each connection the first
// time it runs there and keeps it, so a call costs no parse.
func Prepare(ctx context.Context, db *sql.DB, queries ...string) ([]*sql.Stmt, error) {
	stmts := make([]*sql.Stmt, 0, len(queries))
	for _, q := range queries {
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			for _, s := range stmts {
				_ = s.Close()
			}
			return nil, fmt.Errorf("prepare %q: %w", q, err)
		}
		stmts = append(stmts, st)
	}
	return stmts, nil
}
