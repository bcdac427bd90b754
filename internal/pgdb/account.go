package pgdb

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/abi-engine/engine/ports"
)

// ErrOtherAccount: a store's table belongs to a NATS account other than the
// one the engine opening it serves.
var ErrOtherAccount = errors.New("the table belongs to another NATS account")

// AccountTable is the table every store in a database keeps its account
// in: a row per store, named by its table, as the fence is (ADR 0016).
// Fencing tokens and kept reads are right only among the terms of one
// lease, which is one account's: an engine of another account on the same
// table would serve it to its own callers, and raise its fence with tokens
// that cannot be compared with the first account's, refusing that
// account's engine every write.
const AccountTable = "abi_engine_account"

const accountSchema = `CREATE TABLE IF NOT EXISTS abi_engine_account (
	scope   text PRIMARY KEY,
	account text NOT NULL
)`

// belong makes the store whose table is scope belong to the account ctx's
// source names, or fails with ErrOtherAccount, naming both accounts and
// the table, when it belongs to another. A table that belongs to none,
// made before stores kept an account or opened only by tools, adopts it.
// The record and the check run in one transaction under an advisory lock,
// so two engines opening a new table never both adopt it. Without a source
// in ctx (a tool, a test) it does nothing.
func belong(ctx context.Context, pool *pgxpool.Pool, what, scope string) error {
	source, ok := ports.Account(ctx)
	if !ok {
		return nil
	}
	account, err := source(ctx)
	if err != nil {
		return fmt.Errorf("%s: table %s keeps the data of one NATS account, and this engine's is unknown: %w", what, scope, err)
	}
	var owner string
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('abi-engine account'))"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, accountSchema); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "INSERT INTO abi_engine_account (scope, account) VALUES ($1, $2) ON CONFLICT (scope) DO NOTHING", scope, account); err != nil {
			return err
		}
		return tx.QueryRow(ctx, "SELECT account FROM abi_engine_account WHERE scope = $1", scope).Scan(&owner)
	})
	if err != nil {
		return fmt.Errorf("%s: record the account of table %s: %w", what, scope, err)
	}
	if owner != account {
		return fmt.Errorf("%s: table %s belongs to NATS account %q, and this engine serves account %q; engines of two accounts must not share a table: %w",
			what, scope, owner, account, ErrOtherAccount)
	}
	return nil
}
