// Package postgres is a document store in PostgreSQL tables that every
// engine reaches, with the data as jsonb. Conditional writes are single
// statements, so PostgreSQL's row locks decide races between engines. A
// write that certainly did not happen, for a cause that passes (never
// sent, or rolled back for a deadlock, a serialization failure, a lock
// waited for too long or a statement the server cancelled), fails as
// ports.ErrNotDone (pgdb.NotDone).
package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/abi-engine/engine/internal/docjson"
	"github.com/abi-engine/engine/internal/pgdb"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

var _ ports.DocumentStore = (*Store)(nil)

// DefaultTable is the table used when the configuration names none.
const DefaultTable = "engine_documents"

// Config is the adapter's block under services.document.config.
type Config struct {
	// DSN is a PostgreSQL connection string (URL or key=value form). A
	// connection that has not opened within its connect_timeout fails;
	// without one, or at 0, within 10 s (ADR 0022).
	DSN string `yaml:"dsn"`
	// Table holds the documents, and Table_collections the collection
	// names; both created on Open if missing. Default engine_documents.
	// abi_engine_fence, the table every store's writes are fenced by, and
	// abi_engine_account, the one every store keeps its NATS account in,
	// are refused.
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
		return pgdb.NotTheFence(prefix+".table", c.Table)
	}
	return nil
}

// Store is a pool of connections to the tables.
type Store struct {
	pool   *pgxpool.Pool
	writes pgdb.Fenced // every write, checked against the fencing token
	// ceiling bounds every statement, a read's also by the moment its
	// caller's answer is due (pgdb.Ceiling).
	ceiling     pgdb.Ceiling
	docs        string // quoted
	collections string // quoted
	// versions is the sequence every write takes its version from (quoted),
	// so a document deleted or dropped and made again starts above every
	// version it had.
	versions string
	name     string
}

// Open connects and creates the tables if they are missing. Names and ids
// use the C collation, so order and cursors compare UTF-8 bytes; documents
// go with their collection through ON DELETE CASCADE.
func Open(ctx context.Context, c Config) (*Store, error) {
	return open(ctx, c, pgdb.DefaultCeiling)
}

// open is Open with the ceiling of the store's statements, which tests
// lower.
func open(ctx context.Context, c Config, ceiling pgdb.Ceiling) (*Store, error) {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	s := &Store{
		ceiling:     ceiling,
		docs:        pgdb.Ident(c.Table),
		collections: pgdb.Ident(c.Table + pgdb.CollectionsSuffix),
		versions:    pgdb.Ident(c.Table + pgdb.VersionsSuffix),
		name:        c.Table,
	}
	// The sequence goes with the table's version column. A table from
	// before it, which does not know the versions of the documents it
	// deleted, starts it above any count of writes: the time in
	// microseconds, or the highest version left if higher. The schema's
	// lock keeps two engines from making it at once.
	schema := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s (
		name text COLLATE "C" PRIMARY KEY
	);
	CREATE TABLE IF NOT EXISTS %[2]s (
		collection text COLLATE "C" NOT NULL REFERENCES %[1]s (name) ON DELETE CASCADE,
		id         text COLLATE "C" NOT NULL,
		version    bigint NOT NULL,
		data       jsonb NOT NULL,
		PRIMARY KEY (collection, id)
	);
	DO $$ BEGIN
		IF to_regclass('%[3]s') IS NULL THEN
			CREATE SEQUENCE %[3]s OWNED BY %[2]s.version;
			PERFORM setval('%[3]s', GREATEST(v, 1), v IS NOT NULL) FROM (SELECT GREATEST(MAX(version),
				CASE WHEN EXISTS (SELECT 1 FROM %[1]s) THEN (extract(epoch FROM clock_timestamp()) * 1000000)::bigint END) AS v
				FROM %[2]s) AS seed;
		END IF;
	END $$`, s.collections, s.docs, s.versions)
	pool, err := pgdb.Open(ctx, "document postgres", c.DSN, c.Table, schema)
	if err != nil {
		return nil, err
	}
	s.pool, s.writes = pool, pgdb.NewFenced(pool, c.Table, ceiling)
	return s, nil
}

// Close closes the pool; closing twice is harmless.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

func checkDoc(collection, id string) error {
	if err := storecheck.Collection(collection); err != nil {
		return err
	}
	return storecheck.Key("id", id)
}

// requireCollection fails with ErrNotFound when the collection is missing.
func (s *Store) requireCollection(ctx context.Context, name string) error {
	var ok bool
	qctx, end := s.ceiling.Read(ctx)
	err := end(s.pool.QueryRow(qctx, "SELECT EXISTS (SELECT 1 FROM "+s.collections+" WHERE name = $1)", name).Scan(&ok))
	if err != nil {
		return fmt.Errorf("collection %q in table %s: %w", name, s.name, err)
	}
	if !ok {
		return fmt.Errorf("collection %q: %w", name, ports.ErrNotFound)
	}
	return nil
}

// missingCollection reports whether err is the foreign key failing: the
// collection did not exist when the document was written.
func missingCollection(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23503"
}

// EnsureCollection creates the collection if it is missing.
func (s *Store) EnsureCollection(ctx context.Context, name string) error {
	if err := storecheck.Collection(name); err != nil {
		return err
	}
	if _, err := s.writes.Exec(ctx, "INSERT INTO "+s.collections+" (name) VALUES ($1) ON CONFLICT DO NOTHING", name); err != nil {
		return fmt.Errorf("ensure collection %q in table %s: %w", name, s.name, pgdb.NotDone(err))
	}
	return nil
}

// DropCollection removes the collection; its documents go by cascade.
func (s *Store) DropCollection(ctx context.Context, name string) error {
	if err := storecheck.Collection(name); err != nil {
		return err
	}
	tag, err := s.writes.Exec(ctx, "DELETE FROM "+s.collections+" WHERE name = $1", name)
	if err != nil {
		return fmt.Errorf("drop collection %q in table %s: %w", name, s.name, pgdb.NotDone(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("drop collection %q: %w", name, ports.ErrNotFound)
	}
	return nil
}

// Collections lists the collections by name.
func (s *Store) Collections(ctx context.Context) ([]string, error) {
	qctx, end := s.ceiling.Read(ctx)
	rows, err := s.pool.Query(qctx, "SELECT name FROM "+s.collections+" ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("list collections in table %s: %w", s.name, end(err))
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err = end(err); err != nil {
		return nil, fmt.Errorf("list collections in table %s: %w", s.name, err)
	}
	return names, nil
}

// Put writes the document in one statement chosen by cond: an upsert, an
// insert that does nothing on conflict, or an update at the version.
func (s *Store) Put(ctx context.Context, collection, id string, data map[string]any, cond ports.Cond) (ports.Document, error) {
	if err := checkDoc(collection, id); err != nil {
		return ports.Document{}, err
	}
	raw, canonical, err := docjson.Data(id, data)
	if err != nil {
		return ports.Document{}, err
	}
	want, conditional := cond.Version()
	var row pgx.Row
	// A version comes from the sequence, and stays above the document's
	// own as well: an engine of an older release, draining beside this one,
	// still writes its documents' versions as one more than before. On a
	// conflict the upsert takes a fresh value once it holds the row: the
	// one the insert took may be older than the version a concurrent put
	// committed meanwhile, and one more than that is a value the sequence
	// has not passed, which a document made again later would be given.
	//
	// An insert takes its version before it looks for the row, and may then
	// wait for a transaction that updates or deletes it; meanwhile other
	// puts could give the document higher versions and have it deleted, and
	// the insert would then make it again below them. So every put first
	// takes its turn on the id, an advisory lock held until its
	// transaction ends, and only then its version: the versions one id is
	// given are taken in the order they are committed. Deletes give none
	// and take no turn.
	next := "nextval('" + s.versions + "')"
	// The lock is a volatile function, so PostgreSQL runs the CTE on its
	// own, before the row it feeds takes its version, and never inlines it.
	turn := `WITH turn AS (SELECT pg_advisory_xact_lock(hashtext($4::text || $1::text || '/' || $2::text)))`
	lock := "abi-engine document " + s.name + " "
	switch {
	case !conditional:
		row = s.writes.QueryRow(ctx, turn+` INSERT INTO `+s.docs+` AS d (collection, id, version, data) SELECT $1, $2, `+next+`, $3::jsonb FROM turn
			ON CONFLICT (collection, id) DO UPDATE SET version = GREATEST(`+next+`, d.version + 1), data = excluded.data
			RETURNING version`, collection, id, string(raw), lock)
	case want == 0:
		row = s.writes.QueryRow(ctx, turn+` INSERT INTO `+s.docs+` (collection, id, version, data) SELECT $1, $2, `+next+`, $3::jsonb FROM turn
			ON CONFLICT (collection, id) DO NOTHING
			RETURNING version`, collection, id, string(raw), lock)
	default:
		row = s.writes.QueryRow(ctx, turn+` UPDATE `+s.docs+` AS d SET version = GREATEST(`+next+`, d.version + 1), data = $3::jsonb
			FROM turn WHERE d.collection = $1 AND d.id = $2 AND d.version = $5
			RETURNING d.version`, collection, id, string(raw), lock, int64(want))
	}
	var v int64
	err = row.Scan(&v)
	switch {
	case missingCollection(err):
		return ports.Document{}, fmt.Errorf("put %q: collection %q: %w", id, collection, ports.ErrNotFound)
	case errors.Is(err, pgx.ErrNoRows):
		if err := s.requireCollection(ctx, collection); err != nil {
			return ports.Document{}, fmt.Errorf("put %q: %w", id, err)
		}
		return ports.Document{}, fmt.Errorf("put %q in %q at version %d: %w", id, collection, want, ports.ErrConflict)
	case err != nil:
		return ports.Document{}, fmt.Errorf("put %q in %q of table %s: %w", id, collection, s.name, pgdb.NotDone(pgdb.Full(err)))
	}
	return ports.Document{ID: id, Version: uint64(v), Data: canonical}, nil
}

// Get returns the document.
func (s *Store) Get(ctx context.Context, collection, id string) (ports.Document, error) {
	if err := checkDoc(collection, id); err != nil {
		return ports.Document{}, err
	}
	var (
		v   int64
		raw string
	)
	qctx, end := s.ceiling.Read(ctx)
	err := end(s.pool.QueryRow(qctx, "SELECT version, data::text FROM "+s.docs+" WHERE collection = $1 AND id = $2", collection, id).Scan(&v, &raw))
	if errors.Is(err, pgx.ErrNoRows) {
		if err := s.requireCollection(ctx, collection); err != nil {
			return ports.Document{}, fmt.Errorf("get %q: %w", id, err)
		}
		return ports.Document{}, fmt.Errorf("get %q in %q: %w", id, collection, ports.ErrNotFound)
	}
	if err != nil {
		return ports.Document{}, fmt.Errorf("get %q in %q of table %s: %w", id, collection, s.name, err)
	}
	data, err := docjson.Decode([]byte(raw))
	if err != nil {
		return ports.Document{}, fmt.Errorf("get %q in %q of table %s: %w", id, collection, s.name, err)
	}
	return ports.Document{ID: id, Version: uint64(v), Data: data}, nil
}

// Delete removes the document in one statement. When that statement
// removes nothing, a read tells a missing document from a failed
// condition; a write between the two can leave the read unable to say
// (the document it finds would have been removed), and the delete then
// runs again. Each round that goes again follows another caller's write
// to this document, so only a caller that keeps writing it holds one up.
func (s *Store) Delete(ctx context.Context, collection, id string, cond ports.Cond) error {
	if err := checkDoc(collection, id); err != nil {
		return err
	}
	want, conditional := cond.Version()
	for {
		tag, err := s.writes.Exec(ctx, "DELETE FROM "+s.docs+" WHERE collection = $1 AND id = $2 AND (NOT $3 OR version = $4)",
			collection, id, conditional, int64(want))
		if err != nil {
			return fmt.Errorf("delete %q in %q of table %s: %w", id, collection, s.name, pgdb.NotDone(err))
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		d, err := s.Get(ctx, collection, id)
		switch {
		case errors.Is(err, ports.ErrNotFound):
			return fmt.Errorf("delete: %w", err)
		case err != nil:
			// Every round so far removed nothing, so the delete surely
			// was not done, whatever cut the read short.
			return fmt.Errorf("delete %q in %q of table %s: %w: it removed nothing, and the read of what stands failed: %w", id, collection, s.name, ports.ErrNotDone, err)
		}
		if conditional && d.Version != want {
			return fmt.Errorf("delete %q in %q at version %d, stored %d: %w", id, collection, want, d.Version, ports.ErrConflict)
		}
	}
}

// args collects positional parameters.
type args []any

func (a *args) add(v any) string {
	*a = append(*a, v)
	return fmt.Sprintf("$%d", len(*a))
}

// whereSQL compares jsonb values, which is equality on JSON: 1 = 1.0, true
// is not 1, and a missing field equals nothing.
func whereSQL(where []docjson.Where, a *args) string {
	var b strings.Builder
	for _, w := range where {
		fmt.Fprintf(&b, " AND data -> %s = %s::jsonb", a.add(w.Field), a.add(w.JSON))
	}
	return b.String()
}

// Find pages by the order key of docjson, computed in SQL: the cursor holds
// the last document's key, and the next page starts strictly after it.
// Whether the collection exists is asked after the query, and only when it
// found nothing: a document found shows the collection was there when the
// query read it (a drop deletes both in one statement), where a check made
// before could pass, and a drop then leave the query an empty page of a
// collection that never was there and empty. Count does the same.
func (s *Store) Find(ctx context.Context, collection string, q ports.Query) ([]ports.Document, string, error) {
	if err := storecheck.Collection(collection); err != nil {
		return nil, "", err
	}
	where, limit, err := docjson.Check(q)
	if err != nil {
		return nil, "", err
	}
	after, hasCursor, err := docjson.DecodeCursor(q)
	if err != nil {
		return nil, "", err
	}
	var a args
	coll := a.add(collection)
	cond := whereSQL(where, &a)
	rank, num, str := "0", "0::float8", "''"
	if q.OrderBy != "" {
		f := a.add(q.OrderBy)
		v, typ := "data -> "+f, "jsonb_typeof(data -> "+f+")"
		rank = fmt.Sprintf(`CASE %s WHEN 'boolean' THEN 1 WHEN 'number' THEN 2 WHEN 'string' THEN 3
			WHEN 'array' THEN 4 WHEN 'object' THEN 4 ELSE 0 END`, typ)
		num = fmt.Sprintf(`CASE %[1]s WHEN 'boolean' THEN CASE WHEN %[2]s = 'true'::jsonb THEN 1 ELSE 0 END
			WHEN 'object' THEN 1 WHEN 'number' THEN (data ->> %[3]s)::float8 ELSE 0 END::float8`, typ, v, f)
		str = fmt.Sprintf(`CASE WHEN %s = 'string' THEN data ->> %s ELSE '' END`, typ, f)
	}
	dir, cmp := "ASC", ">"
	if q.Desc {
		dir, cmp = "DESC", "<"
	}
	page := ""
	if hasCursor {
		page = fmt.Sprintf(`WHERE (r, n, s COLLATE "C", id) %s (%s::int, %s::float8, %s::text COLLATE "C", %s::text)`,
			cmp, a.add(after.Rank), a.add(after.Num), a.add(after.Str), a.add(after.ID))
	}
	query := fmt.Sprintf(`SELECT id, version, data::text, r, n, s FROM (
			SELECT id, version, data, %s AS r, %s AS n, (%s) COLLATE "C" AS s FROM %s
			WHERE collection = %s%s
		) AS m %s ORDER BY r %s, n %s, s COLLATE "C" %s, id %s LIMIT %s`,
		rank, num, str, s.docs, coll, cond, page, dir, dir, dir, dir, a.add(limit+1))
	qctx, end := s.ceiling.Read(ctx)
	docs, keys, err := find(qctx, s.pool, query, a)
	if err = end(err); err != nil {
		return nil, "", fmt.Errorf("find in %q of table %s: %w", collection, s.name, err)
	}
	if len(docs) == 0 {
		if err := s.requireCollection(ctx, collection); err != nil {
			return nil, "", fmt.Errorf("find: %w", err)
		}
	}
	if len(docs) <= limit {
		return docs, "", nil
	}
	return docs[:limit], docjson.EncodeCursor(q, keys[limit-1]), nil
}

// find runs Find's query and reads its documents and their keys.
func find(ctx context.Context, pool *pgxpool.Pool, query string, a args) (docs []ports.Document, keys []docjson.Key, err error) {
	rows, err := pool.Query(ctx, query, a...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			d   ports.Document
			v   int64
			raw string
			k   docjson.Key
		)
		if err := rows.Scan(&d.ID, &v, &raw, &k.Rank, &k.Num, &k.Str); err != nil {
			return nil, nil, err
		}
		if d.Data, err = docjson.Decode([]byte(raw)); err != nil {
			return nil, nil, fmt.Errorf("document %q: %w", d.ID, err)
		}
		d.Version, k.ID = uint64(v), d.ID
		docs, keys = append(docs, d), append(keys, k)
	}
	return docs, keys, rows.Err()
}

// Count counts the documents matching where.
func (s *Store) Count(ctx context.Context, collection string, where map[string]any) (int, error) {
	if err := storecheck.Collection(collection); err != nil {
		return 0, err
	}
	conds, err := docjson.Conditions(where)
	if err != nil {
		return 0, err
	}
	var a args
	coll := a.add(collection)
	cond := whereSQL(conds, &a)
	var n int
	qctx, end := s.ceiling.Read(ctx)
	if err := end(s.pool.QueryRow(qctx, "SELECT count(*) FROM "+s.docs+" WHERE collection = "+coll+cond, a...).Scan(&n)); err != nil {
		return 0, fmt.Errorf("count in %q of table %s: %w", collection, s.name, err)
	}
	if n == 0 {
		if err := s.requireCollection(ctx, collection); err != nil {
			return 0, fmt.Errorf("count: %w", err)
		}
	}
	return n, nil
}
