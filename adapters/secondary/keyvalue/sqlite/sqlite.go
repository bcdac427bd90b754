// Package sqlite is a key-value store in a SQLite file on this host. Every
// conditional write is one statement, which SQLite runs under its write
// lock, so handles on the same file, in one process or several, never both
// win.
//
// Like the PostgreSQL stores, the file keeps a fence: the newest fencing
// token (ports.FencingToken) a call under a serving term brought to it. A
// write under an older term is refused with ports.ErrFenced, in the same
// statement that would have made it, so an engine paused across a
// takeover on this host cannot write over its successor. Within a term,
// reads are kept in a cache (internal/termcache), which the fence makes safe.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/abi-engine/engine/internal/sqlitedb"
	"github.com/abi-engine/engine/internal/termcache"
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

// Check refuses a path SQLite would misread, naming it under key: the
// driver takes what follows a "?" as its options. The registry calls it
// when the configuration is built, before anything opens.
func (c Config) Check(key string) error {
	if strings.Contains(c.Path, "?") {
		return fmt.Errorf("%s.path %q holds a \"?\", which SQLite would read as the start of options: %w", key, c.Path, ports.ErrInvalidArgument)
	}
	return nil
}

// Default puts an empty Path at kv.sqlite under the data directory, written so
// it reads as the user wrote the directory ("./.engine/kv.sqlite").
func (c *Config) Default(dataDir string) {
	if c.Path == "" {
		c.Path = strings.TrimRight(dataDir, "/") + "/kv.sqlite"
	}
}

// expires_at is in Unix nanoseconds of this host's clock, NULL for never:
// only engines on this host open the file, so they share the clock. The
// fence holds one row, the newest fencing token seen.
const schema = `CREATE TABLE IF NOT EXISTS kv (
	key        TEXT    NOT NULL PRIMARY KEY,
	value      BLOB    NOT NULL,
	expires_at INTEGER
) WITHOUT ROWID;
` + sqlitedb.FenceSchema

// live is the condition of a row that has not expired at the parameter now.
const live = "(expires_at IS NULL OR expires_at > :now)"

// unfenced is the condition of a write whose parameter token is not older
// than the fence; a write without a token passes math.MaxInt64.
const unfenced = "NOT EXISTS (SELECT 1 FROM abi_engine_fence WHERE token > :token)"

// The statements, prepared once per handle: parsing one costs more than
// running it on a small table.
const (
	getSQL    = "SELECT value, expires_at FROM kv WHERE key = :key AND " + live
	existsSQL = "SELECT EXISTS (SELECT 1 FROM kv WHERE key = :key AND " + live + ")"
	listSQL   = `SELECT key FROM kv
		WHERE key >= :prefix AND key > :cursor AND substr(key, 1, length(:prefix)) = :prefix AND ` + live + `
		ORDER BY key LIMIT :limit`
	// The upserts select their one row, so that the fence can stop it.
	setSQL = `INSERT INTO kv (key, value, expires_at) SELECT :key, :value, :expires WHERE ` + unfenced + `
		ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at`
	setIfAbsentSQL = `INSERT INTO kv (key, value, expires_at) SELECT :key, :value, :expires WHERE ` + unfenced + `
		ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at
		WHERE kv.expires_at IS NOT NULL AND kv.expires_at <= :now`
	deleteSQL        = "DELETE FROM kv WHERE key = :key AND " + unfenced + " RETURNING " + live
	deleteIfValueSQL = "DELETE FROM kv WHERE key = :key AND value = :value AND " + live + " AND " + unfenced
	deleteExpiredSQL = "DELETE FROM kv WHERE expires_at IS NOT NULL AND expires_at <= :now"
	// raiseSQL moves the fence up to token, never down, and returns it.
	raiseSQL = `INSERT INTO abi_engine_fence (scope, token) VALUES ('keyvalue', :token)
		ON CONFLICT (scope) DO UPDATE SET token = max(token, excluded.token) RETURNING token`
	fenceSQL = "SELECT coalesce(max(token), 0) FROM abi_engine_fence"
)

// Store is one handle on the file: reads on the reader pool, writes on the
// one writer.
type Store struct {
	termcache.Answers // QuickGet and EndTerm, from cache

	db   *sqlitedb.DB
	path string

	get, exists, list                                   *sql.Stmt
	set, setIfAbsent, del, deleteIfValue, deleteExpired *sql.Stmt
	raise, fence                                        *sql.Stmt

	cache  *termcache.Cache
	raised atomic.Uint64 // the newest token this handle has raised the fence to
}

// Open opens or creates the file at c.Path.
func Open(ctx context.Context, c Config) (*Store, error) {
	db, err := sqlitedb.Open(ctx, "keyvalue sqlite", c.Path, schema)
	if err != nil {
		return nil, err
	}
	cache := termcache.New(termcache.Bytes)
	s := &Store{db: db, path: c.Path, cache: cache, Answers: cache.Answers()}
	reads, err := sqlitedb.Prepare(ctx, db.Read, getSQL, existsSQL, listSQL)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("keyvalue sqlite %s: %w", c.Path, err)
	}
	s.get, s.exists, s.list = reads[0], reads[1], reads[2]
	writes, err := sqlitedb.Prepare(ctx, db.Write, setSQL, setIfAbsentSQL, deleteSQL, deleteIfValueSQL, deleteExpiredSQL, raiseSQL, fenceSQL)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("keyvalue sqlite %s: %w", c.Path, err)
	}
	s.set, s.setIfAbsent, s.del, s.deleteIfValue, s.deleteExpired = writes[0], writes[1], writes[2], writes[3], writes[4]
	s.raise, s.fence = writes[5], writes[6]
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

// Get returns the value unless it is missing or expired. Under a fencing
// token, a value read once is kept for the rest of that term.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := storecheck.Key("key", key); err != nil {
		return nil, err
	}
	if v, ok, _ := s.QuickGet(ctx, key); ok {
		return v, nil
	}
	at := time.Now().UnixNano()
	rctx, err := sqlitedb.PointRead(ctx)
	if err != nil {
		return nil, fmt.Errorf("get %q from %s: %w", key, s.path, err)
	}
	read, keep := s.cache.StartRead(ctx, key, s.readRaise)
	var v []byte
	var expires sql.NullInt64
	err = s.get.QueryRowContext(rctx, sql.Named("key", key), sql.Named("now", at)).Scan(&v, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("get %q: %w", key, ports.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get %q from %s: %w", key, s.path, err)
	}
	if keep {
		var at time.Time
		if expires.Int64 != 0 {
			at = time.Unix(0, expires.Int64)
		}
		read.Keep(v, at)
	}
	return blob(v), nil
}

var (
	_ ports.QuickGetter = (*Store)(nil)
	_ ports.TermEnder   = (*Store)(nil)
)

// fenceAt is the token parameter of a write under ctx's term, once the
// fence stands at that term: it raises the fence the first time this
// handle writes under a newer term, and fails with ports.ErrFenced when
// the fence has seen a newer one. A write without a token is not fenced.
func (s *Store) fenceAt(ctx context.Context, token uint64) (sql.NamedArg, error) {
	if token == 0 {
		return sql.Named("token", int64(math.MaxInt64)), nil
	}
	if token > math.MaxInt64 {
		return sql.NamedArg{}, fmt.Errorf("fencing token %d is beyond SQLite's integers: %w", token, ports.ErrInvalidArgument)
	}
	if token > s.raised.Load() {
		if err := s.raiseTo(ctx, token); err != nil {
			return sql.NamedArg{}, err
		}
	}
	return sql.Named("token", int64(token)), nil
}

// readRaise raises the fence for a get under a new term. The raise is a
// write, so it takes the writers' turn and waits for the file's lock no
// longer than the get's call allows (sqlitedb.DB.WriteTurn), as a write
// does: run beside the turn, it would hold the one writer connection while
// a write that has the turn waited for it past its own due moment, and
// would itself wait as long as the last write's call allowed.
func (s *Store) readRaise(ctx context.Context, token uint64) error {
	wctx, done, err := s.db.WriteTurn(ctx)
	if err != nil {
		return fmt.Errorf("raise the fence of %s to term %d: %w", s.path, token, err)
	}
	defer done()
	return s.raiseTo(wctx, token)
}

// raiseTo moves the fence up to token, or fails with ports.ErrFenced,
// ending the terms it has passed, when it stands above. It runs in a
// write's turn, and tries again while the turn's wait allows when SQLite
// refuses it for the lock (sqlitedb.DB.Again).
func (s *Store) raiseTo(ctx context.Context, token uint64) error {
	var seen int64
	err := s.raise.QueryRowContext(ctx, sql.Named("token", int64(token))).Scan(&seen)
	for s.db.Again(err) {
		err = s.raise.QueryRowContext(ctx, sql.Named("token", int64(token))).Scan(&seen)
	}
	if err != nil {
		return fmt.Errorf("raise the fence of %s to term %d: %w", s.path, token, err)
	}
	if uint64(seen) > token {
		return s.fenced(uint64(seen), token)
	}
	for {
		raised := s.raised.Load()
		if token <= raised || s.raised.CompareAndSwap(raised, token) {
			return nil
		}
	}
}

// fenced ends in the cache every term below seen, which the fence shows
// to be over, and is the error of a write under token.
func (s *Store) fenced(seen, token uint64) error {
	s.cache.End(seen - 1)
	return fmt.Errorf("%w: %s has seen serving term %d; this write carries term %d", ports.ErrFenced, s.path, seen, token)
}

// refused tells a write that changed nothing whether the fence stopped it:
// ports.ErrFenced if the fence stands above token, else nil.
func (s *Store) refused(ctx context.Context, token uint64) error {
	if token == 0 {
		return nil
	}
	var seen int64
	if err := s.fence.QueryRowContext(ctx).Scan(&seen); err != nil {
		return fmt.Errorf("read the fence of %s: %w", s.path, err)
	}
	if uint64(seen) > token {
		return s.fenced(uint64(seen), token)
	}
	return nil
}

// write runs a write of key under ctx's term: the key leaves the cache for
// as long as the write runs, and do gets the fence's token parameter. A
// write that fails for another reason than the fence is taken as one that
// may have landed. Every statement of a write runs on its own, outside a
// transaction, so one SQLite refused for the lock (another engine on this
// host held it through a try) changed nothing, and do, whose statements
// change nothing until one of them succeeds, runs again while the turn's
// wait allows (sqlitedb.DB.Again); the raise of the fence before it waits
// within the same wait, so the two end by the same moment. A write refused
// for the lock once that wait is over is ports.ErrNotDone
// (sqlitedb.NotDone), and so is one that found the store closed.
func (s *Store) write(ctx context.Context, key string, do func(ctx context.Context, token uint64, fence sql.NamedArg) error) error {
	token, _ := ports.FencingToken(ctx)
	ctx, done, err := s.db.WriteTurn(ctx)
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", key, s.path, err)
	}
	defer done()
	fence, err := s.fenceAt(ctx, token)
	if err != nil {
		// The write's own statement has not run: bar the fence's refusal
		// and a token SQLite cannot hold, the write is not done, whatever
		// became of the raise, which the write, sent again under the same
		// term, makes again or finds made; and a raise SQLite had no room
		// for is the file's lack of room.
		if !errors.Is(err, ports.ErrFenced) && !errors.Is(err, ports.ErrInvalidArgument) && !errors.Is(err, ports.ErrNotDone) {
			err = fmt.Errorf("%w: %w", ports.ErrNotDone, err)
		}
		return sqlitedb.Full(err)
	}
	ended := s.cache.WriteStarts(token, key)
	err = do(ctx, token, fence)
	for s.db.Again(err) {
		err = do(ctx, token, fence)
	}
	ended(err == nil || errors.Is(err, ports.ErrFenced))
	return sqlitedb.NotDone(sqlitedb.Full(err))
}

// Set writes the value and its expiry, replacing any other.
func (s *Store) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if err := storecheck.Write("key", key, ttl); err != nil {
		return err
	}
	return s.write(ctx, key, func(ctx context.Context, token uint64, fence sql.NamedArg) error {
		res, err := s.set.ExecContext(ctx, sql.Named("key", key), sql.Named("value", blob(value)), expiry(ttl), fence)
		if err != nil {
			return fmt.Errorf("set %q in %s: %w", key, s.path, err)
		}
		if ok, err := changed(res); err != nil || ok {
			return err
		}
		if err := s.refused(ctx, token); err != nil {
			return fmt.Errorf("set %q: %w", key, err)
		}
		return fmt.Errorf("set %q in %s: the upsert changed no row", key, s.path)
	})
}

// SetIfAbsent inserts the value, or replaces an expired one, in one
// statement: a live row makes the upsert change nothing.
func (s *Store) SetIfAbsent(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error) {
	if err := storecheck.Write("key", key, ttl); err != nil {
		return false, err
	}
	var won bool
	err := s.write(ctx, key, func(ctx context.Context, token uint64, fence sql.NamedArg) error {
		res, err := s.setIfAbsent.ExecContext(ctx, sql.Named("key", key), sql.Named("value", blob(value)), expiry(ttl), now(), fence)
		if err != nil {
			return fmt.Errorf("set %q if absent in %s: %w", key, s.path, err)
		}
		if won, err = changed(res); err != nil || won {
			return err
		}
		return s.refused(ctx, token)
	})
	return won, err
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
	err := s.write(ctx, key, func(ctx context.Context, token uint64, fence sql.NamedArg) error {
		err := s.del.QueryRowContext(ctx, sql.Named("key", key), now(), fence).Scan(&wasLive)
		if errors.Is(err, sql.ErrNoRows) {
			return s.refused(ctx, token)
		}
		if err != nil {
			return fmt.Errorf("delete %q from %s: %w", key, s.path, err)
		}
		return nil
	})
	return wasLive, err
}

// DeleteIfValue removes the row if it is live and holds value.
func (s *Store) DeleteIfValue(ctx context.Context, key string, value []byte) (bool, error) {
	if err := storecheck.Key("key", key); err != nil {
		return false, err
	}
	var deleted bool
	err := s.write(ctx, key, func(ctx context.Context, token uint64, fence sql.NamedArg) error {
		res, err := s.deleteIfValue.ExecContext(ctx, sql.Named("key", key), sql.Named("value", blob(value)), now(), fence)
		if err != nil {
			return fmt.Errorf("delete %q if it holds the value, in %s: %w", key, s.path, err)
		}
		if deleted, err = changed(res); err != nil || deleted {
			return err
		}
		return s.refused(ctx, token)
	})
	return deleted, err
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
// them, this only gives their space back. It takes its turn on the writer
// as a write does, which bounds its wait for the lock, and runs under ctx
// itself, so a sweep stopped while it deletes stops it.
func (s *Store) DeleteExpired(ctx context.Context) (int, error) {
	_, done, err := s.db.WriteTurn(ctx)
	if err != nil {
		return 0, fmt.Errorf("delete expired keys: %w", err)
	}
	defer done()
	res, err := s.deleteExpired.ExecContext(ctx, sql.Named("now", time.Now().UnixNano()))
	for s.db.Again(err) {
		res, err = s.deleteExpired.ExecContext(ctx, sql.Named("now", time.Now().UnixNano()))
	}
	if err != nil {
		return 0, fmt.Errorf("delete expired keys: %w", err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}
