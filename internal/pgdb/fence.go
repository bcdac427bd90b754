package pgdb

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/abi-engine/engine/ports"
)

// The fence of every store in a database: a row per store (its table),
// holding the newest fencing token a write to it carried. A write runs
// after abi_engine_fence_check in the same transaction: a token older than
// the row's is refused; a newer one raises the row, taking its lock, so a
// write of the older term that already passed the check (holding the row
// in share mode) commits first and every write of the newer term after it.
// The first read takes no lock, so two writes of a new term never both
// hold the row in share mode and then wait on each other to raise it.
//
// The check waits for the row no longer than p_lock_wait_ms, or the
// session's lock_timeout if shorter, and puts lock_timeout back as it was
// for the write after it. A write of an older term holds the row from its
// check to its commit, which its engine, paused or cut off halfway through
// sending it, can keep from coming for as long as the pause lasts, or
// until the server finds the connection dead; every write of the newer
// term would wait for it meanwhile, without end under a context with no
// deadline, as an engine's calls run. Such a write fails instead as not
// done (lock_not_available, NotDone), and may be sent again. The check of
// two arguments, which earlier releases make and call, waits without a
// bound; it is a function of its own, so that neither release, opening a
// store, replaces the other's.
const fenceSchema = `
CREATE TABLE IF NOT EXISTS abi_engine_fence (
	scope text PRIMARY KEY,
	token bigint NOT NULL
);
CREATE OR REPLACE FUNCTION abi_engine_fence_check(p_scope text, p_token bigint, p_lock_wait_ms bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	seen bigint;
	was text := current_setting('lock_timeout');
BEGIN
	IF was::interval = interval '0' OR was::interval > p_lock_wait_ms * interval '1 millisecond' THEN
		PERFORM set_config('lock_timeout', p_lock_wait_ms::text, true);
	END IF;
	SELECT token INTO seen FROM abi_engine_fence WHERE scope = p_scope;
	IF seen IS NULL OR seen < p_token THEN
		INSERT INTO abi_engine_fence (scope, token) VALUES (p_scope, p_token)
			ON CONFLICT (scope) DO UPDATE SET token = GREATEST(abi_engine_fence.token, excluded.token)
			RETURNING token INTO seen;
	ELSE
		SELECT token INTO seen FROM abi_engine_fence WHERE scope = p_scope FOR SHARE;
	END IF;
	PERFORM set_config('lock_timeout', was, true);
	IF seen > p_token THEN
		RAISE EXCEPTION 'store % has seen serving term %; this write carries term %', p_scope, seen, p_token
			USING ERRCODE = 'AB0F1';
	END IF;
END
$$`

// fenceLockWait is the longest a check of the fence waits for its row
// (fenceSchema).
const fenceLockWait = 5 * time.Second

// checkSQL checks the fence of scope ($1) for the token $2.
var checkSQL = fmt.Sprintf("SELECT abi_engine_fence_check($1, $2, %d)", fenceLockWait.Milliseconds())

// fencedCode is the SQLSTATE abi_engine_fence_check raises.
const fencedCode = "AB0F1"

// createFence makes the fence table and its check, under a lock of their
// own, since every store in the database shares them.
func createFence(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('abi-engine fence'))"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, fenceSchema)
		return err
	})
}

// Fenced runs a store's writes, each checked against the fence of scope,
// the store's table, when its context carries a fencing token
// (ports.FencingToken): the check and the write go in one batch, so in one
// round trip and one transaction. A write without a token runs alone.
// Each write, from taking its connection to its answer, is bounded by
// the ceiling (Ceiling.Write).
type Fenced struct {
	pool    *pgxpool.Pool
	scope   string
	ceiling Ceiling
	// tries is how many connections Conn takes, at most, before it has
	// one whose session the server has not ended: as many as the pool
	// holds, and one opened anew.
	tries int
}

// NewFenced returns the writer of the store whose fence row is scope,
// each of whose writes the server must answer within ceiling.
func NewFenced(pool *pgxpool.Pool, scope string, ceiling Ceiling) Fenced {
	return Fenced{pool: pool, scope: scope, ceiling: ceiling, tries: int(pool.Config().MaxConns) + 1}
}

// Exec runs one write statement.
func (f Fenced) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	ctx, end := f.ceiling.Write(ctx)
	c, err := f.Conn(ctx)
	if err != nil {
		return pgconn.CommandTag{}, end(err)
	}
	tag, err := f.execOn(ctx, c, sql, args...)
	return tag, end(err)
}

// ExecOn runs one write statement on c, a connection Conn took, and
// releases it: a caller that must know its write has a connection before
// it commits to sending it, as a batch of sets does, takes one first.
func (f Fenced) ExecOn(ctx context.Context, c *pgxpool.Conn, sql string, args ...any) (pgconn.CommandTag, error) {
	ctx, end := f.ceiling.Write(ctx)
	tag, err := f.execOn(ctx, c, sql, args...)
	return tag, end(err)
}

func (f Fenced) execOn(ctx context.Context, c *pgxpool.Conn, sql string, args ...any) (pgconn.CommandTag, error) {
	token, ok := ports.FencingToken(ctx)
	if !ok {
		defer c.Release()
		return c.Exec(ctx, sql, args...)
	}
	var tag pgconn.CommandTag
	err := f.checked(ctx, c, token, sql, args, func(br pgx.BatchResults) (err error) {
		tag, err = br.Exec()
		return err
	})
	return tag, err
}

// Conn takes a connection from the pool for a write. A write that gets
// none, its context having ended while it waited for one to come free or
// a new one having failed to open, was never sent: it fails as
// ports.ErrNotDone. The pool's own Exec, QueryRow and SendBatch would
// fail it with the context's error alone, as one cancelled in flight.
//
// A connection whose session the server ended while it sat in the pool
// (an operator's pg_terminate_backend, a restart, a pooler's idle
// timeout) would take the write, and answer it with the server's word
// that the session had ended, FATAL: the write's outcome would then be
// unknown, though none of it reached the server. pgxpool pings a
// connection idle for over a second as it hands it out, which finds it;
// one used a moment before is pinged here when the server has sent it
// anything, or closed it (spoke, a look at its socket that costs no round
// trip), and one whose ping fails is dropped for another.
func (f Fenced) Conn(ctx context.Context) (*pgxpool.Conn, error) {
	for range f.tries {
		c, err := f.pool.Acquire(ctx)
		if err != nil {
			return nil, fmt.Errorf("%w: no connection to send the write on: %w", ports.ErrNotDone, err)
		}
		if !spoke(c.Conn().PgConn().Conn()) || c.Ping(ctx) == nil {
			return c, nil
		}
		c.Release() // closed by the failed ping: the pool drops it
	}
	return nil, fmt.Errorf("%w: no connection to send the write on: the server had ended the session of each of the %d the pool handed out", ports.ErrNotDone, f.tries)
}

// checked runs a write statement on c, which it releases, after the check
// of the fence for token, in one batch, so in one round trip and one
// transaction; read reads the statement's result.
func (f Fenced) checked(ctx context.Context, c *pgxpool.Conn, token uint64, sql string, args []any, read func(pgx.BatchResults) error) error {
	term, err := bigint(token)
	if err != nil {
		c.Release()
		return err
	}
	b := &pgx.Batch{}
	b.Queue(checkSQL, f.scope, term)
	b.Queue(sql, args...)
	br := c.SendBatch(ctx, b)
	if err := fenceResult(br); err != nil {
		_ = br.Close()
		c.Release()
		return err
	}
	err = read(br)
	// The batch commits at its end, which Close reads: a write is done
	// only once Close has said so.
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	// Released before failed raises the fence, which takes a connection
	// of its own.
	c.Release()
	return f.failed(ctx, token, err)
}

// failed passes on err, the outcome of a write that ran after its check.
// A write that failed took the check's raise down with its transaction, so
// the fence is raised again on its own: a newer term fences the older ones
// from its first write, even one that fails, as on SQLite. No rows is not a
// failure; the transaction committed.
func (f Fenced) failed(ctx context.Context, token uint64, err error) error {
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		_ = f.Raise(ctx, token)
	}
	return err
}

// QueryRow runs one write statement that returns a row; the statement runs
// when the row is scanned.
func (f Fenced) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	token, termed := ports.FencingToken(ctx)
	return fencedRow{f: f, ctx: ctx, token: token, termed: termed, sql: sql, args: args}
}

// Raise moves the fence up to token on its own, in a transaction of its
// own, and fails with ports.ErrFenced when it stands above token. Once it
// has returned, every write of an older term either committed before it or
// is refused: a store may then trust what it reads under token.
func (f Fenced) Raise(ctx context.Context, token uint64) error {
	term, err := bigint(token)
	if err != nil {
		return err
	}
	ctx, end := f.ceiling.Write(ctx)
	_, err = f.pool.Exec(ctx, checkSQL, f.scope, term)
	return end(fencedError(err))
}

// bigint is token as the fence stores it. A token beyond PostgreSQL's
// bigint is refused, as the SQLite stores refuse it: cast, it would turn
// negative, below every term, and a store with no fence yet would take it
// as its first.
func bigint(token uint64) (int64, error) {
	if token > math.MaxInt64 {
		return 0, fmt.Errorf("fencing token %d is beyond PostgreSQL's bigint: %w", token, ports.ErrInvalidArgument)
	}
	return int64(token), nil
}

// ErrCheckFailed marks a server's error that failed a write's check of the
// fence for a cause other than a newer term (ports.ErrFenced), such as the
// fence row waited for too long: the write after the check did not run,
// and the cause was none of its own, but its term's or the server's.
var ErrCheckFailed = errors.New("the server failed the check of the fence")

// fenceResult reads the check's result: ports.ErrFenced when the store has
// seen a newer term, ErrCheckFailed when the server failed the check
// otherwise (an error of severity ERROR, which aborts the transaction);
// in either case the write after it did not run. An error that ends the
// session (FATAL, PANIC) read in the check's place is neither: the check
// and the write commit under one Sync, before the server sends the check's
// result, so that word may follow a commit (a pooler's own, after it lost
// the server, or a server's interrupted between its commit and its flush),
// and it is returned as it is, of unknown outcome.
func fenceResult(br pgx.BatchResults) error {
	_, err := br.Exec()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code != fencedCode && pgErr.SeverityUnlocalized == "ERROR" {
		return fmt.Errorf("%w: %w", ErrCheckFailed, err)
	}
	return fencedError(err)
}

// fencedError is ports.ErrFenced for the check's refusal, else err.
func fencedError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == fencedCode {
		return fmt.Errorf("%w: %s", ports.ErrFenced, pgErr.Message)
	}
	return err
}

type fencedRow struct {
	f      Fenced
	ctx    context.Context
	token  uint64
	termed bool
	sql    string
	args   []any
}

func (r fencedRow) Scan(dest ...any) error {
	ctx, end := r.f.ceiling.Write(r.ctx)
	return end(r.scan(ctx, dest))
}

func (r fencedRow) scan(ctx context.Context, dest []any) error {
	c, err := r.f.Conn(ctx)
	if err != nil {
		return err
	}
	if !r.termed {
		defer c.Release()
		return c.QueryRow(ctx, r.sql, r.args...).Scan(dest...)
	}
	return r.f.checked(ctx, c, r.token, r.sql, r.args, func(br pgx.BatchResults) error {
		return br.QueryRow().Scan(dest...)
	})
}
