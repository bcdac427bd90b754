// Package pgdb opens the PostgreSQL pools of the shared storage adapters and
// creates their tables, so that engines starting together do not trip over
// each other's CREATE TABLE.
package pgdb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

// Open connects to dsn and runs schema under an advisory lock named after
// table, because concurrent CREATE TABLE IF NOT EXISTS can still fail on a
// unique index of the catalog. what names the adapter in errors, such as
// "keyvalue postgres"; table is checked as the yaml key "table".
func Open(ctx context.Context, what, dsn, table, schema string) (*pgxpool.Pool, error) {
	if dsn == "" {
		return nil, fmt.Errorf("%s: dsn is empty: %w", what, ports.ErrInvalidArgument)
	}
	if err := storecheck.Table("table", table); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := NotTheFence("table", table); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("%s: dsn: %w: %w", what, ports.ErrInvalidArgument, err)
	}
	// A dsn without connect_timeout (or with 0) would wait for a new
	// connection as long as the server's host holds it open unanswered:
	// a statement ends at its ceiling, but the pool's attempt to connect
	// goes on, holding a place in the pool.
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	// A connection whose server's host stops answering is closed within
	// deadHost, and the statement on it fails: a write's outcome is then
	// unknown, never not done, since its bytes were sent.
	cfg.ConnConfig.DialFunc = dialer(cfg.ConnConfig.ConnectTimeout).DialContext

	// The stores' statements are written for READ COMMITTED: a statement
	// that waits for another transaction's row then reads the row that
	// transaction committed, so racers on a key queue on its lock and the
	// loser sees the winner's write. A database, role or dsn whose default
	// isolation is stricter would fail the loser with a serialization
	// error instead. A SET as each connection opens comes after the
	// database's and role's settings and the dsn's options, so it holds on
	// a connection of its own, as behind a pooler in session mode; behind
	// one in transaction mode it reaches one server connection only, and
	// the database's default must then be read committed, as it is unless
	// changed. It is not a parameter of the startup message, which a
	// pooler such as PgBouncer refuses, by default, for a name it does not
	// know, so that the engine could not connect at all. The server's
	// keepalive settings (serverKeepalive) are set alike, for the same
	// reason.
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "SET default_transaction_isolation TO 'read committed'; "+serverKeepalive)
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: connect: %w", what, err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "abi-engine schema "+table); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, schema)
		return err
	})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("%s: create table %s: %w", what, table, err)
	}
	if err := createFence(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("%s: create the fence table: %w", what, err)
	}
	if err := belong(ctx, pool, what, table); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// DefaultConnectTimeout bounds the opening of a connection, from dialing
// to the server's first answer, when the dsn's connect_timeout does not.
const DefaultConnectTimeout = 10 * time.Second

// Ident quotes a table name already checked by storecheck.Table.
func Ident(table string) string { return pgx.Identifier{table}.Sanitize() }

// The document store keeps, beside its table, the collection names in the
// table named after it with CollectionsSuffix, and the sequence of its
// versions in the one named with VersionsSuffix.
const (
	CollectionsSuffix = "_collections"
	VersionsSuffix    = "_versions"
)

// NotBesideDocuments refuses a keyvalue table named like a relation the
// document store keeps beside its table, named yamlKey in the error. In a
// database both use, CREATE TABLE IF NOT EXISTS would keep whichever of
// the two came first, and every call of the other store would fail.
func NotBesideDocuments(yamlKey, table string) error {
	for _, suffix := range []string{CollectionsSuffix, VersionsSuffix} {
		if strings.HasSuffix(table, suffix) {
			return fmt.Errorf("%s %q ends in %q, as the relation a document store (postgres) keeps beside its table %q does: %w",
				yamlKey, table, suffix, strings.TrimSuffix(table, suffix), ports.ErrInvalidArgument)
		}
	}
	return nil
}

// FenceTable is the table every store in a database checks its writes
// against (fenceSchema).
const FenceTable = "abi_engine_fence"

// NotTheFence refuses a store's table named like the fence table, or the
// account table, named yamlKey in the error. CREATE TABLE IF NOT EXISTS
// would keep whichever of the two came first: the store's table in the
// fence's place, or the store on the fence's, and every fenced write (or
// every open) of every store in the database would then fail.
func NotTheFence(yamlKey, table string) error {
	switch table {
	case FenceTable:
		return fmt.Errorf("%s %q is the table every store in the database keeps its fence in: %w", yamlKey, table, ports.ErrInvalidArgument)
	case AccountTable:
		return fmt.Errorf("%s %q is the table every store in the database keeps its NATS account in: %w", yamlKey, table, ports.ErrInvalidArgument)
	}
	return nil
}

// HasColumns refuses a table, named yamlKey in the error, that lacks one of
// columns: a relation of that name made before the store's schema, by
// another store (a document store's table of the same name) or by hand,
// which CREATE TABLE IF NOT EXISTS kept. The store would open on it and
// every call would then fail.
func HasColumns(ctx context.Context, pool *pgxpool.Pool, yamlKey, table string, columns ...string) error {
	var have []string
	err := pool.QueryRow(ctx, `SELECT coalesce(array_agg(attname::text), '{}') FROM pg_attribute
		WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped`, Ident(table)).Scan(&have)
	if err != nil {
		return fmt.Errorf("read the columns of table %s: %w", table, err)
	}
	for _, c := range columns {
		if !slices.Contains(have, c) {
			return fmt.Errorf("%s %q names a relation of another shape (no column %q), made by another store, such as a document store's table of that name, or by hand: %w",
				yamlKey, table, c, ports.ErrInvalidArgument)
		}
	}
	return nil
}

// diskFull is PostgreSQL's SQLSTATE for a write it had no room for.
const diskFull = "53100"

// Full marks err, a write's, as ports.ErrStorageFull when the server had
// no room for it (disk_full): the statement's transaction then rolls back,
// so nothing was written. Any other error is returned as it is.
func Full(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == diskFull {
		return fmt.Errorf("%w: %w", ports.ErrStorageFull, err)
	}
	return err
}

// The SQLSTATEs of a transaction the server rolled back for a cause that
// passes: a write sent again may be taken.
const (
	serializationFailure = "40001"
	deadlockDetected     = "40P01"
	lockNotAvailable     = "55P03" // a lock waited for past lock_timeout
	// A statement cancelled, past statement_timeout or by a cancel request
	// to the server. It ends the statement with an ERROR, so its
	// transaction rolls back; a cancel that comes once the commit is under
	// way is not acted on until it is over, and fails nothing.
	queryCanceled = "57014"
)

// NotDone marks err, a write's, as ports.ErrNotDone when the write
// certainly did not happen, and may be taken if sent again: pgx never sent
// it (pgconn.SafeToRetry: the context had ended, or the connection was
// closed, before it was used), the connection it was to go on never
// opened, or the server rolled its transaction back for a serialization
// failure, a deadlock, a lock it waited for too long or a statement it
// cancelled (statement_timeout, a cancel request). Each of a store's
// writes is one transaction, a batch of keyvalue sets included, so the
// whole of it was not done. An error of severity FATAL or PANIC ends the
// session, maybe after a commit, and is never not done. Any other error is
// returned as it is.
func NotDone(err error) error {
	if err == nil || errors.Is(err, ports.ErrNotDone) {
		return err
	}
	var (
		pgErr   *pgconn.PgError
		connErr *pgconn.ConnectError
	)
	switch {
	case pgconn.SafeToRetry(err), errors.As(err, &connErr):
	case errors.As(err, &pgErr) && pgErr.SeverityUnlocalized == "ERROR" &&
		slices.Contains([]string{serializationFailure, deadlockDetected, lockNotAvailable, queryCanceled}, pgErr.Code):
	default:
		return err
	}
	return fmt.Errorf("%w: %w", ports.ErrNotDone, err)
}
