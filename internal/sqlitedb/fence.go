package sqlitedb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"sync/atomic"

	"github.com/abi-engine/engine/ports"
)

// FenceSchema is the table of a file's fence: a row per store in the file
// (its scope), holding the newest fencing token (ports.FencingToken) a
// write to it carried. A store adds it to its own schema.
const FenceSchema = `CREATE TABLE IF NOT EXISTS abi_engine_fence (
	scope TEXT    NOT NULL PRIMARY KEY,
	token INTEGER NOT NULL
) WITHOUT ROWID`

const (
	// raiseFenceSQL moves the scope's row up to the token, and writes
	// nothing when it stands there or above.
	raiseFenceSQL = `INSERT INTO abi_engine_fence (scope, token) VALUES (:scope, :token)
		ON CONFLICT (scope) DO UPDATE SET token = excluded.token WHERE excluded.token > abi_engine_fence.token`
	readFenceSQL = "SELECT coalesce(max(token), 0) FROM abi_engine_fence WHERE scope = :scope"
)

// Fence checks the writes of a store whose every write runs in a
// transaction that takes the file's write lock when it begins: checked
// there, the fence cannot move between the check and the write. Engines
// on one host that open the same file (a standby of the same release, an
// engine paused across a takeover) share the fence, so once a newer
// serving term has tried to write, no write of an older one lands.
type Fence struct {
	scope, path string
	raiseStmt   *sql.Stmt
	read        *sql.Stmt
	raised      atomic.Uint64 // the newest token this handle raised the fence to
	// raising, when set, runs in a raise once it has committed; a test
	// spends there the time a raise can spend waiting for the lock.
	raising func()
}

// NewFence prepares the fence's statements on db, the connections the
// store's write transactions run on. The file must have FenceSchema.
func NewFence(ctx context.Context, db *sql.DB, scope, path string) (*Fence, error) {
	stmts, err := Prepare(ctx, db, raiseFenceSQL, readFenceSQL)
	if err != nil {
		return nil, fmt.Errorf("the fence of %s: %w", path, err)
	}
	return &Fence{scope: scope, path: path, raiseStmt: stmts[0], read: stmts[1]}, nil
}

// Begin begins a write transaction of a call under ctx's serving term, on
// conn, one of the connections the fence was made on, which the caller
// holds (as to drop it, RollBack), once the fence has passed that term: the
// caller writes in it and commits, or rolls back (RollBack). It fails with
// ports.ErrFenced when the fence has seen a newer term. A write without a
// token (a tool, a test, the schema) is not fenced.
//
// The first time this handle writes under a newer term, the fence is
// raised to that term in a transaction of its own, so the term fences the
// older ones even when the write itself then fails (a conflict, a missing
// collection), as on PostgreSQL. The transaction of the write then checks
// the fence first, under the write lock it takes when it begins. The
// raise and the write each wait for the lock, in tries on conn, whose busy
// timeout is a try (LockTry), while wait, the call's, allows: the two
// together end by the moment wait ends, so a call due sooner is still told
// in time that it was not done.
//
// Begin fails before the caller's write has run any of its statements, so
// each failure of it but the fence's refusal and a token SQLite cannot
// hold is ports.ErrNotDone: a BEGIN refused for another reason than the
// lock, a failed read of the fence, and any failure of the raise, even of
// its COMMIT. Such a raise may have moved the fence or not, but the fence
// is the term's, not the write's: the write, sent again under the same
// term, raises it again or finds it raised, and writes as if this attempt
// had never been.
func (f *Fence) Begin(ctx context.Context, conn *sql.Conn, wait Wait) (*sql.Tx, error) {
	token, termed, err := tokenOf(ctx)
	if err != nil {
		return nil, err
	}
	tx, err := f.begin(ctx, conn, wait, token, termed)
	if err != nil && !errors.Is(err, ports.ErrFenced) && !errors.Is(err, ports.ErrNotDone) {
		return nil, fmt.Errorf("%w: %w", ports.ErrNotDone, err)
	}
	return tx, err
}

// begin is Begin once the token is read.
func (f *Fence) begin(ctx context.Context, conn *sql.Conn, wait Wait, token uint64, termed bool) (*sql.Tx, error) {
	if termed && token > f.raised.Load() {
		if err := f.raise(ctx, conn, wait, token); err != nil {
			return nil, err
		}
	}
	tx, err := wait.Begin(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("begin in %s: %w", f.path, err)
	}
	if termed {
		if err := f.check(ctx, tx, token); err != nil {
			return nil, RollBack(conn, tx, err)
		}
	}
	return tx, nil
}

// raise moves the fence up to token in a transaction of its own, or fails
// with ports.ErrFenced when it stands above.
func (f *Fence) raise(ctx context.Context, conn *sql.Conn, wait Wait, token uint64) error {
	tx, err := wait.Begin(ctx, conn)
	if err != nil {
		return fmt.Errorf("raise the fence of %s to term %d: %w", f.path, token, err)
	}
	if _, err := tx.StmtContext(ctx, f.raiseStmt).ExecContext(ctx, sql.Named("scope", f.scope), sql.Named("token", int64(token))); err != nil {
		return RollBack(conn, tx, fmt.Errorf("raise the fence of %s to term %d: %w", f.path, token, err))
	}
	if err := f.check(ctx, tx, token); err != nil {
		return RollBack(conn, tx, err)
	}
	if err := Commit(ctx, conn, tx); err != nil {
		return fmt.Errorf("raise the fence of %s to term %d: %w", f.path, token, err)
	}
	if f.raising != nil {
		f.raising()
	}
	for {
		raised := f.raised.Load()
		if token <= raised || f.raised.CompareAndSwap(raised, token) {
			return nil
		}
	}
}

func (f *Fence) check(ctx context.Context, tx *sql.Tx, token uint64) error {
	// A point read in a transaction that holds the lock waits for nothing;
	// under a cancellable context it would cost two goroutines (PointRead).
	rctx, err := PointRead(ctx)
	if err != nil {
		return fmt.Errorf("read the fence of %s: %w", f.path, err)
	}
	var seen int64
	if err := tx.StmtContext(rctx, f.read).QueryRowContext(rctx, sql.Named("scope", f.scope)).Scan(&seen); err != nil {
		return fmt.Errorf("read the fence of %s: %w", f.path, err)
	}
	if uint64(seen) > token {
		return fmt.Errorf("%w: %s has seen serving term %d; this write carries term %d", ports.ErrFenced, f.path, seen, token)
	}
	return nil
}

// tokenOf is ctx's fencing token, if it carries one SQLite can hold.
func tokenOf(ctx context.Context) (uint64, bool, error) {
	token, ok := ports.FencingToken(ctx)
	if ok && token > math.MaxInt64 {
		return 0, false, fmt.Errorf("fencing token %d is beyond SQLite's integers: %w", token, ports.ErrInvalidArgument)
	}
	return token, ok, nil
}
