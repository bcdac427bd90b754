package sqlitedb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/abi-engine/engine/ports"
)

// ErrOtherAccount: a SQLite file belongs to a NATS account other than the
// one the engine opening it serves.
var ErrOtherAccount = errors.New("the file belongs to another NATS account")

// The account of a file is one row: the NATS account whose engine opened
// it first (ports.Account). Fencing tokens and kept reads are right only
// among the terms of one lease, which is one account's: an engine of
// another account on the same file would mix the two accounts' data and
// fence the other engine out with tokens that cannot be compared.
const (
	accountSchema = `CREATE TABLE IF NOT EXISTS abi_engine_account (
	one     INTEGER NOT NULL PRIMARY KEY CHECK (one = 1),
	account TEXT    NOT NULL
)`
	adoptAccountSQL = "INSERT INTO abi_engine_account (one, account) VALUES (1, :account) ON CONFLICT (one) DO NOTHING"
	readAccountSQL  = "SELECT account FROM abi_engine_account WHERE one = 1"
)

// Belong makes the file on db belong to the account ctx's source names, or
// fails with ErrOtherAccount, naming both accounts and the file, when it
// belongs to another. A file that belongs to none, made before files kept
// an account or opened only by tools, adopts it. The record and the check
// run in one transaction on db, whose transactions take the write lock
// when they begin, so two engines opening a new file never both adopt it.
// Without a source in ctx (a tool, a test) it does nothing.
func Belong(ctx context.Context, db *sql.DB, what, path string) error {
	source, ok := ports.Account(ctx)
	if !ok {
		return nil
	}
	account, err := source(ctx)
	if err != nil {
		return fmt.Errorf("%s: %s keeps the data of one NATS account, and this engine's is unknown: %w", what, path, err)
	}
	// The lock another handle holds is waited for in tries (Wait), as a
	// write's is: on the writer of a DB (Open), SQLite's own wait is one
	// try; on a pool whose busy timeout is BusyTimeout, as the vector
	// store's, the first try is the whole wait, as it was before.
	wait := WaitFor(ctx)
	tx, err := db.BeginTx(ctx, nil)
	for err != nil && wait.Again(err) {
		tx, err = db.BeginTx(ctx, nil)
	}
	if err != nil {
		return fmt.Errorf("%s: record the account of %s: %w", what, path, err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, accountSchema); err != nil {
		return fmt.Errorf("%s: record the account of %s: %w", what, path, err)
	}
	if _, err := tx.ExecContext(ctx, adoptAccountSQL, sql.Named("account", account)); err != nil {
		return fmt.Errorf("%s: record the account of %s: %w", what, path, err)
	}
	var owner string
	if err := tx.QueryRowContext(ctx, readAccountSQL).Scan(&owner); err != nil {
		return fmt.Errorf("%s: read the account of %s: %w", what, path, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%s: record the account of %s: %w", what, path, err)
	}
	if owner != account {
		return fmt.Errorf("%s: %s belongs to NATS account %q, and this engine serves account %q; engines of two accounts must not share a data_dir: %w",
			what, path, owner, account, ErrOtherAccount)
	}
	return nil
}
