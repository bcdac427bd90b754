// Package sqlite is a key-value store in a SQLite file on this host. Every
// conditional write is one statement, which SQLite runs under its write
// lock, so handles on the same file, in one process or several, never both
// win.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/abi-engine/engine/internal/sqlitedb"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

var _ ports.KeyValue = (*Store)(nil)

// Config is the adapter's block under services.keyvalue.config.
type Config struct {
	// Path is the SQLite file; the configuration layer defaults it under
	// the data directory.
	Path string `yaml:"path"`
}

// LocalStorage implements ports.StorageConfig.
func (c Config) LocalStorage() string { return "SQLite at " + c.Path }

// Default puts an empty Path at kv.sqlite under the data directory, written so
// it reads as the user wrote the directory ("./.engine/kv.sqlite").
func (c *Config) Default(dataDir string) {
	if c.Path == "" {
		c.Path = strings.TrimRight(dataDir, "/") + "/kv.sqlite"
	}
}

// expires_at is in Unix nanoseconds of this host's clock, NULL for never:
// only engines on this host open the file, so they share the clock.
const schema = `CREATE TABLE IF NOT EXISTS kv (
	key        TEXT    NOT NULL PRIMARY KEY,
	value      BLOB    NOT NULL,
	expires_at INTEGER
) WITHOUT ROWID`

// live is the condition of a row that has not expired at the parameter now.
const live = "(expires_at IS NULL OR expires_at > :now)"

// The statements, prepared once per handle: parsing one costs more than
// running it on a small table.
const (
	getSQL    = "SELECT value FROM kv WHERE key = :key AND " + live
	existsSQL = "SELECT EXISTS (SELECT 1 FROM kv WHERE key = :key AND " + live + ")"
	listSQL   = `SELECT key FROM kv
		WHERE key >= :prefix AND key > :cursor AND substr(key, 1, length(:prefix)) = :prefix AND ` + live + `
		ORDER BY key LIMIT :limit`
	setSQL = `INSERT INTO kv (key, value, expires_at) VALUES (:key, :value, :expires)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at`
	setIfAbsentSQL = `INSERT INTO kv (key, value, expires_at) VALUES (:key, :value, :expires)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at
		WHERE kv.expires_at IS NOT NULL AND kv.expires_at <= :now`
	deleteSQL        = "DELETE FROM kv WHERE key = :key RETURNING " + live
	deleteIfValueSQL = "DELETE FROM kv WHERE key = :key AND value = :value AND " + live
	deleteExpiredSQL = "DELETE FROM kv WHERE expires_at IS NOT NULL AND expires_at <= :now"
)

// Store is one handle on the file: reads on the reader pool, writes on the
// one writer.
type Store struct {
	db   *sqlitedb.DB
	path string

	get, exists, list                                   *sql.Stmt
	set, setIfAbsent, del, deleteIfValue, deleteExpired *sql.Stmt
}

// Open opens or creates the file at c.Path.
func Open(ctx context.Context, c Config) (*Store, error) {
	db, err := sqlitedb.Open(ctx, "keyvalue sqlite", c.Path, schema)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, path: c.Path}
	reads, err := sqlitedb.Prepare(ctx, db.Read, getSQL, existsSQL, listSQL)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("keyvalue sqlite %s: %w", c.Path, err)
	}
	s.get, s.exists, s.list = reads[0], reads[1], reads[2]
	writes, err := sqlitedb.Prepare(ctx, db.Write, setSQL, setIfAbsentSQL, deleteSQL, deleteIfValueSQL, deleteExpiredSQL)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("keyvalue sqlite %s: %w", c.Path, err)
	}
	s.set, s.setIfAbsent, s.del, s.deleteIfValue, s.deleteExpired = writes[0], writes[1], writes[2], writes[3], writes[4]
	return s, nil
}

// Close closes the handle; closing twice is harmless. Closing the pools
// closes the statements prepared on them.
func (s *Store) Close() error { return s.db.Close() }

func now() sql.NamedArg { return sql.Named("now", time.Now().UnixNano()) }

// expiry is the expires_at of a value written now with ttl.
func expiry(ttl time.Duration) sql.NamedArg {
	if ttl == 0 {
		return sql.Named("expires", nil)
	}
	return sql.Named("expires", time.Now().Add(ttl).UnixNano())
}

// blob keeps an empty value from being stored as NULL.
func blob(v []byte) []byte {
	if v == nil {
		return []byte{}
	}
	return v
}

// Get returns the value unless it is missing or expired.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := storecheck.Key("key", key); err != nil {
		return nil, err
	}
	rctx, err := sqlitedb.PointRead(ctx)
	if err != nil {
		return nil, fmt.Errorf("get %q from %s: %w", key, s.path, err)
	}
	var v []byte
	err = s.get.QueryRowContext(rctx, sql.Named("key", key), now()).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("get %q: %w", key, ports.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get %q from %s: %w", key, s.path, err)
	}
	return blob(v), nil
}

// Set writes the value and its expiry, replacing any other.
func (s *Store) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if err := storecheck.Write("key", key, ttl); err != nil {
		return err
	}
	_, err := s.set.ExecContext(ctx, sql.Named("key", key), sql.Named("value", blob(value)), expiry(ttl))
	if err != nil {
		return fmt.Errorf("set %q in %s: %w", key, s.path, err)
	}
	return nil
}

// SetIfAbsent inserts the value, or replaces an expired one, in one
// statement: a live row makes the upsert change nothing.
func (s *Store) SetIfAbsent(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error) {
	if err := storecheck.Write("key", key, ttl); err != nil {
		return false, err
	}
	res, err := s.setIfAbsent.ExecContext(ctx, sql.Named("key", key), sql.Named("value", blob(value)), expiry(ttl), now())
	if err != nil {
		return false, fmt.Errorf("set %q if absent in %s: %w", key, s.path, err)
	}
	return changed(res)
}

func changed(res sql.Result) (bool, error) {
	n, err := res.RowsAffected()
	return n == 1, err
}

// Delete removes the row, expired or not, and reports whether it was live.
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	if err := storecheck.Key("key", key); err != nil {
		return false, err
	}
	var wasLive bool
	err := s.del.QueryRowContext(ctx, sql.Named("key", key), now()).Scan(&wasLive)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("delete %q from %s: %w", key, s.path, err)
	}
	return wasLive, nil
}

// DeleteIfValue removes the row if it is live and holds value.
func (s *Store) DeleteIfValue(ctx context.Context, key string, value []byte) (bool, error) {
	if err := storecheck.Key("key", key); err != nil {
		return false, err
	}
	res, err := s.deleteIfValue.ExecContext(ctx, sql.Named("key", key), sql.Named("value", blob(value)), now())
	if err != nil {
		return false, fmt.Errorf("delete %q if it holds the value, in %s: %w", key, s.path, err)
	}
	return changed(res)
}

// Exists reports whether the key holds a live value.
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	if err := storecheck.Key("key", key); err != nil {
		return false, err
	}
	rctx, err := sqlitedb.PointRead(ctx)
	if err != nil {
		return false, fmt.Errorf("exists %q in %s: %w", key, s.path, err)
	}
	var ok bool
	err = s.exists.QueryRowContext(rctx, sql.Named("key", key), now()).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("exists %q in %s: %w", key, s.path, err)
	}
	return ok, nil
}

// ListKeys pages by key: the cursor is the last key of the page. Keys are
// TEXT with SQLite's default BINARY collation, which orders UTF-8 by bytes.
// The prefix is compared with substr, never LIKE, so % and _ stay literal.
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
	rows, err := s.list.QueryContext(ctx, sql.Named("prefix", prefix), sql.Named("cursor", cursor), now(), sql.Named("limit", limit+1))
	if err != nil {
		return nil, "", fmt.Errorf("list keys %q in %s: %w", prefix, s.path, err)
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, "", fmt.Errorf("list keys %q in %s: %w", prefix, s.path, err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list keys %q in %s: %w", prefix, s.path, err)
	}
	if len(keys) <= limit {
		return keys, "", nil
	}
	keys = keys[:limit]
	return keys, keys[limit-1], nil
}

var _ ports.Expirer = (*Store)(nil)

// DeleteExpired removes the rows whose TTL has passed; reads already skip
// them, this only gives their space back.
func (s *Store) DeleteExpired(ctx context.Context) (int, error) {
	res, err := s.deleteExpired.ExecContext(ctx, sql.Named("now", time.Now().UnixNano()))
	if err != nil {
		return 0, fmt.Errorf("delete expired keys: %w", err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}
