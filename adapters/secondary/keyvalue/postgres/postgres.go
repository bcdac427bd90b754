// Package postgres is a key-value store in a PostgreSQL table that every
// engine reaches. Conditional writes are single statements, so PostgreSQL's
// row locks decide races; expiry is judged by the server's clock alone, so
// engines on hosts whose clocks differ agree on it.
//
// Every write under a serving term is checked against the table's fence
// (internal/pgdb). Within a term, reads are kept in a cache
// (internal/termcache), which the fence and the lease make safe: a value
// kept expires by the time the server said it had left, counted on this
// host's clocks from before the server read its own.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/abi-engine/engine/internal/pgdb"
	"github.com/abi-engine/engine/internal/termcache"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

var _ ports.KeyValue = (*Store)(nil)

const (
	// DefaultTable is the table used when the configuration names none.
	DefaultTable = "engine_kv"
)

// Config is the adapter's block under services.keyvalue.config.
type Config struct {
	// DSN is a PostgreSQL connection string (URL or key=value form). A
	// connection that has not opened within its connect_timeout fails;
	// without one, or at 0, within 10 s (ADR 0022).
	DSN string `yaml:"dsn"`
	// Table holds the keys; created on Open if missing. Default engine_kv.
	// A name ending in _collections or _versions is refused: the document
	// store (postgres) keeps relations so named beside its table; so is
	// abi_engine_fence, the table every store's writes are fenced by, and
	// abi_engine_account, the one every store keeps its NATS account in. A
	// relation of that name already there of another shape, such as a
	// document store's table, is refused at Open.
	Table string `yaml:"table"`
}

// LocalStorage implements ports.StorageConfig: every engine reaches the
// server, so nothing stays on this host.
func (Config) LocalStorage() string { return "" }

// Check refuses, without connecting, the settings Open cannot work with,
// naming each under prefix: the registry calls it when the configuration
// is built, before anything opens.
func (c Config) Check(prefix string) error {
	if c.DSN == "" {
		return fmt.Errorf("%s.dsn is empty: %w", prefix, ports.ErrInvalidArgument)
	}
	if c.Table != "" {
		if err := storecheck.Table(prefix+".table", c.Table); err != nil {
			return err
		}
		if err := pgdb.NotTheFence(prefix+".table", c.Table); err != nil {
			return err
		}
		return pgdb.NotBesideDocuments(prefix+".table", c.Table)
	}
	return nil
}

// live is the condition of a row that has not expired.
const live = "(expires_at IS NULL OR expires_at > clock_timestamp())"

// left is how many whole microseconds a live row has to live on the
// server's clock, rounded down; NULL for never.
const left = "floor(extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint"

// Store is a pool of connections to the table.
type Store struct {
	termcache.Answers // QuickGet and EndTerm, from cache

	pool   *pgxpool.Pool
	writes pgdb.Fenced // every write, checked against the fencing token
	table  string      // quoted
	name   string
	cache  *termcache.Cache
	sets   *setter // Set's writes, several in one statement
	// ceiling bounds every statement, a read's also by the moment its
	// caller's answer is due (pgdb.Ceiling).
	ceiling pgdb.Ceiling
	// The statements: a get, plain and one that also says how long the
	// value has to live (for a read that may be kept); a batch of sets.
	getSQL, getKeptSQL, setBatchSQL string
}

// Open connects and creates the table if it is missing. Keys use the C
// collation, so ORDER BY and the cursor compare UTF-8 bytes.
func Open(ctx context.Context, c Config) (*Store, error) {
	return open(ctx, c, pgdb.DefaultCeiling)
}

// open is Open with the ceiling of the store's statements, which tests
// lower.
func open(ctx context.Context, c Config, ceiling pgdb.Ceiling) (*Store, error) {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if err := pgdb.NotBesideDocuments("table", c.Table); err != nil {
		return nil, fmt.Errorf("keyvalue postgres: %w", err)
	}
	schema := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
		key        text COLLATE "C" PRIMARY KEY,
		value      bytea NOT NULL,
		expires_at timestamptz
	)`, pgdb.Ident(c.Table))
	pool, err := pgdb.Open(ctx, "keyvalue postgres", c.DSN, c.Table, schema)
	if err != nil {
		return nil, err
	}
	if err := pgdb.HasColumns(ctx, pool, "table", c.Table, "key", "value", "expires_at"); err != nil {
		pool.Close()
		return nil, fmt.Errorf("keyvalue postgres: %w", err)
	}
	table := pgdb.Ident(c.Table)
	s := &Store{
		pool: pool, writes: pgdb.NewFenced(pool, c.Table, ceiling), table: table, name: c.Table,
		ceiling:     ceiling,
		cache:       termcache.New(termcache.Bytes),
		getSQL:      "SELECT value FROM " + table + " WHERE key = $1 AND " + live,
		getKeptSQL:  "SELECT value, " + left + " FROM " + table + " WHERE key = $1 AND " + live,
		setBatchSQL: setBatchSQL(table),
	}
	s.Answers = s.cache.Answers()
	s.sets = newSetter(int(pool.Config().MaxConns), ceiling, s.writes.Conn, s.writeSets)
	return s, nil
}

// Close closes the pool; closing twice is harmless.
func (s *Store) Close() error {
	s.sets.close()
	s.pool.Close()
	return nil
}

// micros is ttl in whole microseconds, rounded up so a positive TTL never
// expires at once; nil, which stores a NULL expiry, for no TTL.
func micros(ttl time.Duration) *int64 {
	if ttl == 0 {
		return nil
	}
	us := int64((ttl + time.Microsecond - 1) / time.Microsecond)
	return &us
}

// bytea keeps an empty value from being stored as NULL.
func bytea(v []byte) []byte {
	if v == nil {
		return []byte{}
	}
	return v
}

// Get returns the value unless it is missing or expired. Under a fencing
// token, a value read once is kept for the rest of that term.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := storecheck.Key("key", key); err != nil {
		return nil, err
	}
	if v, ok, _ := s.QuickGet(ctx, key); ok {
		return v, nil
	}
	read, keep := s.cache.StartRead(ctx, key, s.raise)
	qctx, end := s.ceiling.Read(ctx)
	var v []byte
	var err error
	if !keep {
		err = s.pool.QueryRow(qctx, s.getSQL, key).Scan(&v)
	} else {
		// The server reads its clock after this one: what it says is
		// left, counted from here, ends no later than it would.
		at := time.Now()
		var us *int64
		if err = s.pool.QueryRow(qctx, s.getKeptSQL, key).Scan(&v, &us); err == nil {
			keepRead(read, v, at, us)
		}
	}
	err = end(err)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("get %q: %w", key, ports.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get %q from table %s: %w", key, s.name, err)
	}
	return bytea(v), nil
}

// keepRead keeps a value read at at that the server gave
// microseconds to live, nil for ever. A thousandth of the time left is
// taken off, for a server clock that runs up to that much faster than
// this host's.
func keepRead(read termcache.Read, v []byte, at time.Time, us *int64) {
	var expires time.Time
	if us != nil {
		left := time.Duration(*us) * time.Microsecond
		if left -= left / 1000; left <= 0 {
			return
		}
		expires = at.Add(left)
	}
	read.Keep(bytea(v), expires)
}

var (
	_ ports.QuickGetter = (*Store)(nil)
	_ ports.TermEnder   = (*Store)(nil)
)

// raise moves the table's fence up to token, for the cache's new term.
func (s *Store) raise(ctx context.Context, token uint64) error {
	err := s.writes.Raise(ctx, token)
	if errors.Is(err, ports.ErrFenced) {
		s.cache.End(token)
	}
	return err
}

// write runs a write of key: the key leaves the cache for as long as the
// write runs, and a write the fence refuses ends its term in the cache. A
// write that fails otherwise may yet land (a query cancelled in flight
// can commit after its caller has returned), unless it was never sent (a
// set given up while it queued, a connection that never opened) or the
// server refused it: the cache is told which. A write that certainly did
// not happen, for a cause that passes, fails as ports.ErrNotDone
// (pgdb.NotDone), so its caller may send it again.
func (s *Store) write(ctx context.Context, key string, do func() error) error {
	token, termed := ports.FencingToken(ctx)
	ended := s.cache.WriteStarts(token, key)
	err := pgdb.NotDone(do())
	fenced := errors.Is(err, ports.ErrFenced)
	ended(err == nil || fenced || errors.Is(err, pgx.ErrNoRows) || errors.Is(err, ports.ErrNotDone) || rolledBack(err))
	if termed && fenced {
		s.cache.End(token)
	}
	return pgdb.Full(err)
}

// rolledBack reports whether err is the server's refusal of a write's
// statement, which rolls its transaction back: the write did not land. An
// error of severity FATAL or PANIC ends the session, maybe after a commit,
// and is not one.
func rolledBack(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.SeverityUnlocalized == "ERROR"
}

// Set writes the value and its expiry, replacing any other. Sets that
// queue while others are written go together (setter).
func (s *Store) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if err := storecheck.Write("key", key, ttl); err != nil {
		return err
	}
	err := s.write(ctx, key, func() error { return s.sets.set(ctx, key, value, micros(ttl)) })
	if err != nil {
		return fmt.Errorf("set %q in table %s: %w", key, s.name, err)
	}
	return nil
}

// SetIfAbsent inserts the value, or replaces an expired one, in one
// statement. Racers on one key queue on its row lock, and each re-checks
// the WHERE against the row the winner wrote, so exactly one changes it.
func (s *Store) SetIfAbsent(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error) {
	if err := storecheck.Write("key", key, ttl); err != nil {
		return false, err
	}
	var won bool
	err := s.write(ctx, key, func() error {
		tag, err := s.writes.Exec(ctx, `INSERT INTO `+s.table+` AS kv (key, value, expires_at)
			VALUES ($1, $2, clock_timestamp() + $3::bigint * interval '1 microsecond')
			ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at
			WHERE kv.expires_at IS NOT NULL AND kv.expires_at <= clock_timestamp()`,
			key, bytea(value), micros(ttl))
		won = tag.RowsAffected() == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("set %q if absent in table %s: %w", key, s.name, err)
	}
	return won, nil
}

// Delete removes the row, expired or not, and reports whether it was live.
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	if err := storecheck.Key("key", key); err != nil {
		return false, err
	}
	var wasLive bool
	err := s.write(ctx, key, func() error {
		return s.writes.QueryRow(ctx, "DELETE FROM "+s.table+" WHERE key = $1 RETURNING "+live, key).Scan(&wasLive)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("delete %q from table %s: %w", key, s.name, err)
	}
	return wasLive, nil
}

// DeleteIfValue removes the row if it is live and holds value.
func (s *Store) DeleteIfValue(ctx context.Context, key string, value []byte) (bool, error) {
	if err := storecheck.Key("key", key); err != nil {
		return false, err
	}
	var deleted bool
	err := s.write(ctx, key, func() error {
		tag, err := s.writes.Exec(ctx, "DELETE FROM "+s.table+" WHERE key = $1 AND value = $2 AND "+live, key, bytea(value))
		deleted = tag.RowsAffected() == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("delete %q if it holds the value, in table %s: %w", key, s.name, err)
	}
	return deleted, nil
}

// Exists reports whether the key holds a live value.
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	if err := storecheck.Key("key", key); err != nil {
		return false, err
	}
	var ok bool
	qctx, end := s.ceiling.Read(ctx)
	err := end(s.pool.QueryRow(qctx, "SELECT EXISTS (SELECT 1 FROM "+s.table+" WHERE key = $1 AND "+live+")", key).Scan(&ok))
	if err != nil {
		return false, fmt.Errorf("exists %q in table %s: %w", key, s.name, err)
	}
	return ok, nil
}

// ListKeys pages by key: the cursor is the last key of the page. The prefix
// is matched with starts_with, never LIKE, so % and _ stay literal.
func (s *Store) ListKeys(ctx context.Context, prefix string, limit int, cursor string) ([]string, string, error) {
	if err := storecheck.Prefix("prefix", prefix); err != nil {
		return nil, "", err
	}
	if err := storecheck.Prefix("cursor", cursor); err != nil {
		return nil, "", err
	}
	limit, err := storecheck.Limit("limit", limit)
	if err != nil {
		return nil, "", err
	}
	qctx, end := s.ceiling.Read(ctx)
	rows, err := s.pool.Query(qctx, `SELECT key FROM `+s.table+`
		WHERE key >= $1 AND key > $2 AND starts_with(key, $1) AND `+live+`
		ORDER BY key LIMIT $3`, prefix, cursor, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("list keys %q in table %s: %w", prefix, s.name, end(err))
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err = end(err); err != nil {
		return nil, "", fmt.Errorf("list keys %q in table %s: %w", prefix, s.name, err)
	}
	if len(keys) <= limit {
		return keys, "", nil
	}
	keys = keys[:limit]
	return keys, keys[limit-1], nil
}

var _ ports.Expirer = (*Store)(nil)

// DeleteExpired removes the rows whose TTL has passed on the server's
// clock; reads already skip them, this only gives their space back. It
// passes over rows a write holds, and never waits on one: a batch of sets
// takes its rows in key order, the sweep would take them in the table's,
// and the two could wait on each other.
func (s *Store) DeleteExpired(ctx context.Context) (int, error) {
	ctx, end := s.ceiling.Write(ctx)
	tag, err := s.pool.Exec(ctx, `DELETE FROM `+s.table+` WHERE key IN (
		SELECT key FROM `+s.table+` WHERE expires_at IS NOT NULL AND expires_at <= clock_timestamp()
		FOR UPDATE SKIP LOCKED)`)
	if err = end(err); err != nil {
		return 0, fmt.Errorf("delete expired keys: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
