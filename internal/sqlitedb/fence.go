package sqlitedb

import (
	"context"
	"database/sql"
	"fmt"
	"math"

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
	readFenceSQL = "SELECT coalesce(max(token), 0) FROM abi_engine_fence"
)

// Fence checks the writes of a store whose every write runs in a
// transaction that holds the file's write lock from its start: checked
// there, the fence cannot move between the check and the write. Engines
// on one host that open the same file (a standby of the same release, an
// engine paused across a takeover) share the fence, so once a newer
// serving term has written, no write of an older one lands.
type Fence struct {
	scope, path string
	raise, read *sql.Stmt
}

// NewFence prepares the fence's statements on db, the connections the
// store's write transactions run on. The file must have FenceSchema.
func NewFence(ctx context.Context, db *sql.DB, scope, path string) (*Fence, error) {
	stmts, err := Prepare(ctx, db, raiseFenceSQL, readFenceSQL)
	if err != nil {
		return nil, fmt.Errorf("the fence of %s: %w", path, err)
	}
	return &Fence{scope: scope, path: path, raise: stmts[0], read: stmts[1]}, nil
}

// Hold runs first in a write transaction of a call under ctx's serving
// term. It raises the fence to the term's token, and fails with
// ports.ErrFenced when the fence has seen a newer term: the caller rolls
// back, and nothing of the call is written. A write without a token (a
// tool, a test, the schema) is not fenced.
func (f *Fence) Hold(ctx context.Context, tx *sql.Tx) error {
	token, ok := ports.FencingToken(ctx)
	if !ok {
		return nil
	}
	if token > math.MaxInt64 {
		return fmt.Errorf("fencing token %d is beyond SQLite's integers: %w", token, ports.ErrInvalidArgument)
	}
	if _, err := tx.StmtContext(ctx, f.raise).ExecContext(ctx, sql.Named("scope", f.scope), sql.Named("token", int64(token))); err != nil {
		return fmt.Errorf("raise the fence of %s to term %d: %w", f.path, token, err)
	}
	var seen int64
	if err := tx.StmtContext(ctx, f.read).QueryRowContext(ctx).Scan(&seen); err != nil {
		return fmt.Errorf("read the fence of %s: %w", f.path, err)
	}
	if uint64(seen) > token {
		return fmt.Errorf("%w: %s has seen serving term %d; this write carries term %d", ports.ErrFenced, f.path, seen, token)
	}
	return nil
}
