// Package sqlite is a document store in a SQLite file on this host.
// Every write runs in a transaction that takes the write lock when it
// begins, so handles on the same file never both win a conditional write,
// and checks there the file's fence (sqlitedb.Fence): once a newer serving
// term has written, a write of an older one is refused with
// ports.ErrFenced.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/abi-engine/engine/internal/docjson"
	"github.com/abi-engine/engine/internal/sqlitedb"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

var _ ports.DocumentStore = (*Store)(nil)

// Config is the adapter's block under services.document.config.
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

// Default puts an empty Path at documents.sqlite under the data directory, written so
// it reads as the user wrote the directory ("./.engine/documents.sqlite").
func (c *Config) Default(dataDir string) {
	if c.Path == "" {
		c.Path = strings.TrimRight(dataDir, "/") + "/documents.sqlite"
	}
}

// data holds the canonical JSON text of each document. versions holds the
// last version given to any document, which its triggers keep: each write
// takes the next, so a document deleted or dropped and made again starts
// above every version it had. A file from before the table, which
// does not know the versions of the documents it deleted, starts it above
// any count of writes: the time in microseconds (and the highest version
// left, if higher). A new file starts it at 0.
const schema = `CREATE TABLE IF NOT EXISTS collections (
	name TEXT NOT NULL PRIMARY KEY
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS documents (
	collection TEXT    NOT NULL,
	id         TEXT    NOT NULL,
	version    INTEGER NOT NULL,
	data       TEXT    NOT NULL,
	PRIMARY KEY (collection, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS versions (
	one  INTEGER NOT NULL PRIMARY KEY CHECK (one = 1),
	last INTEGER NOT NULL
);
INSERT OR IGNORE INTO versions (one, last) SELECT 1, max(COALESCE((SELECT MAX(version) FROM documents), 0),
	CASE WHEN EXISTS (SELECT 1 FROM collections) THEN CAST(unixepoch('subsec') * 1000000 AS INTEGER) ELSE 0 END);
CREATE TRIGGER IF NOT EXISTS versions_on_insert AFTER INSERT ON documents
	BEGIN UPDATE versions SET last = max(last, NEW.version); END;
CREATE TRIGGER IF NOT EXISTS versions_on_update AFTER UPDATE OF version ON documents
	BEGIN UPDATE versions SET last = max(last, NEW.version); END;
` + sqlitedb.FenceSchema

// The statements of the hot calls, prepared once per handle; find and
// count build theirs from the query.
const (
	getSQL        = "SELECT version, data FROM documents WHERE collection = ? AND id = ?"
	collectionSQL = "SELECT EXISTS (SELECT 1 FROM collections WHERE name = ?)"
	versionSQL    = "SELECT version FROM documents WHERE collection = ? AND id = ?"
	// The document's version (0: missing) and the last one given to any.
	putVersionSQL = `SELECT COALESCE((SELECT version FROM documents WHERE collection = ? AND id = ?), 0),
		(SELECT last FROM versions)`
	putSQL = `INSERT INTO documents (collection, id, version, data) VALUES (?, ?, ?, ?)
		ON CONFLICT (collection, id) DO UPDATE SET version = excluded.version, data = excluded.data`
	deleteSQL = "DELETE FROM documents WHERE collection = ? AND id = ?"
)

// Store is one handle on the file: reads on the reader pool, writes and
// the reads of a conditional write on the one writer.
type Store struct {
	db   *sqlitedb.DB
	path string

	getDoc, hasReading                *sql.Stmt
	hasWriting, versionOf, putVersion *sql.Stmt
	upsert, remove                    *sql.Stmt
	fence                             *sqlitedb.Fence
}

// Open opens or creates the file at c.Path.
func Open(ctx context.Context, c Config) (*Store, error) {
	db, err := sqlitedb.Open(ctx, "document sqlite", c.Path, schema)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, path: c.Path}
	reads, err := sqlitedb.Prepare(ctx, db.Read, getSQL, collectionSQL)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("document sqlite %s: %w", c.Path, err)
	}
	s.getDoc, s.hasReading = reads[0], reads[1]
	writes, err := sqlitedb.Prepare(ctx, db.Write, collectionSQL, versionSQL, putVersionSQL, putSQL, deleteSQL)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("document sqlite %s: %w", c.Path, err)
	}
	s.hasWriting, s.versionOf, s.putVersion, s.upsert, s.remove = writes[0], writes[1], writes[2], writes[3], writes[4]
	if s.fence, err = sqlitedb.NewFence(ctx, db.Write, "document", c.Path); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("document sqlite: %w", err)
	}
	return s, nil
}

// Close closes the handle; closing twice is harmless.
func (s *Store) Close() error { return s.db.Close() }

// requireCollection fails with ErrNotFound when the collection is missing;
// has is hasReading, or hasWriting within a write transaction.
func (s *Store) requireCollection(ctx context.Context, has *sql.Stmt, name string) error {
	var ok bool
	err := has.QueryRowContext(ctx, name).Scan(&ok)
	if err != nil {
		return fmt.Errorf("collection %q in %s: %w", name, s.path, err)
	}
	if !ok {
		return fmt.Errorf("collection %q: %w", name, ports.ErrNotFound)
	}
	return nil
}

func checkDoc(collection, id string) error {
	if err := storecheck.Collection(collection); err != nil {
		return err
	}
	return storecheck.Key("id", id)
}

// EnsureCollection creates the collection if it is missing.
func (s *Store) EnsureCollection(ctx context.Context, name string) error {
	if err := storecheck.Collection(name); err != nil {
		return err
	}
	return s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO collections (name) VALUES (?) ON CONFLICT DO NOTHING", name); err != nil {
			return fmt.Errorf("ensure collection %q in %s: %w", name, s.path, err)
		}
		return nil
	})
}

// DropCollection removes the collection and its documents in one
// transaction.
func (s *Store) DropCollection(ctx context.Context, name string) error {
	if err := storecheck.Collection(name); err != nil {
		return err
	}
	return s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, "DELETE FROM collections WHERE name = ?", name)
		if err != nil {
			return fmt.Errorf("drop collection %q in %s: %w", name, s.path, err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return fmt.Errorf("drop collection %q: %w", name, ports.ErrNotFound)
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM documents WHERE collection = ?", name); err != nil {
			return fmt.Errorf("drop collection %q in %s: %w", name, s.path, err)
		}
		return nil
	})
}

// Collections lists the collections by name.
func (s *Store) Collections(ctx context.Context) ([]string, error) {
	rows, err := s.db.Read.QueryContext(ctx, "SELECT name FROM collections ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("list collections in %s: %w", s.path, err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("list collections in %s: %w", s.path, err)
		}
		names = append(names, n)
	}
	return names, rows.Err()
}

// inTx runs f in a transaction, which the DSN makes take the write lock at
// once, begun by the fence once it has passed ctx's term. A write refused
// for the lock before its COMMIT (another engine on this host held it
// until the write's wait ended, sqlitedb.DB.WriteTurn) is ports.ErrNotDone
// (sqlitedb.NotDone), and one SQLite
// had no room for, in the write or in the raise of the fence before it, is
// ports.ErrStorageFull (sqlitedb.Full). A write that could not take the
// writer's connection ran nothing, and is ports.ErrNotDone. The write waits
// for its turn on the writer under ctx (sqlitedb.WriteTurn); the
// transaction and f then run under the turn's context, ctx's values
// without its cancellation, so a caller that gives up half way does not
// leave a transaction cut short. A write whose rollback failed closes
// the writer's connection (sqlitedb.RollBack), which may still be in its
// transaction, and the next write opens another; so does a write whose
// COMMIT failed and left the transaction open (sqlitedb.Commit).
func (s *Store) inTx(ctx context.Context, f func(ctx context.Context, tx *sql.Tx) error) error {
	ctx, done, err := s.db.WriteTurn(ctx)
	if err != nil {
		return fmt.Errorf("write to %s: %w", s.path, err)
	}
	defer done()
	conn, err := s.db.Write.Conn(ctx)
	if err != nil {
		// Nothing ran: the pool was closed, or a connection could not be
		// opened, and ctx, which does not end, stopped no wait.
		return fmt.Errorf("take the writer's connection to %s: %w: %w", s.path, ports.ErrNotDone, err)
	}
	defer conn.Close()
	tx, err := s.fence.Begin(ctx, conn, s.db.Wait())
	if err != nil {
		// The raise of the fence before the write may find no room.
		return sqlitedb.NotDone(sqlitedb.Full(err))
	}
	if err := f(ctx, tx); err != nil {
		return sqlitedb.Full(sqlitedb.RollBack(conn, tx, err))
	}
	if err := sqlitedb.Commit(ctx, conn, tx); err != nil {
		return sqlitedb.Full(fmt.Errorf("commit in %s: %w", s.path, err))
	}
	return nil
}

// version is the stored version of the document, 0 when missing.
func (s *Store) version(ctx context.Context, tx *sql.Tx, collection, id string) (uint64, error) {
	var v uint64
	err := tx.StmtContext(ctx, s.versionOf).QueryRowContext(ctx, collection, id).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read %q in %q of %s: %w", id, collection, s.path, err)
	}
	return v, nil
}

// Put writes the document if cond holds.
func (s *Store) Put(ctx context.Context, collection, id string, data map[string]any, cond ports.Cond) (ports.Document, error) {
	if err := checkDoc(collection, id); err != nil {
		return ports.Document{}, err
	}
	raw, canonical, err := docjson.Data(id, data)
	if err != nil {
		return ports.Document{}, err
	}
	doc := ports.Document{ID: id, Data: canonical}
	err = s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := s.requireCollection(ctx, tx.StmtContext(ctx, s.hasWriting), collection); err != nil {
			return fmt.Errorf("put %q: %w", id, err)
		}
		var cur, last uint64
		if err := tx.StmtContext(ctx, s.putVersion).QueryRowContext(ctx, collection, id).Scan(&cur, &last); err != nil {
			return fmt.Errorf("read %q in %q of %s: %w", id, collection, s.path, err)
		}
		if want, ok := cond.Version(); ok && want != cur {
			return fmt.Errorf("put %q in %q at version %d, stored %d: %w", id, collection, want, cur, ports.ErrConflict)
		}
		doc.Version = last + 1
		_, err := tx.StmtContext(ctx, s.upsert).ExecContext(ctx, collection, id, doc.Version, string(raw))
		if err != nil {
			return fmt.Errorf("put %q in %q of %s: %w", id, collection, s.path, err)
		}
		return nil
	})
	if err != nil {
		return ports.Document{}, err
	}
	return doc, nil
}

// Get returns the document.
func (s *Store) Get(ctx context.Context, collection, id string) (ports.Document, error) {
	if err := checkDoc(collection, id); err != nil {
		return ports.Document{}, err
	}
	var (
		v   uint64
		raw string
	)
	rctx, err := sqlitedb.PointRead(ctx)
	if err != nil {
		return ports.Document{}, fmt.Errorf("get %q in %q of %s: %w", id, collection, s.path, err)
	}
	err = s.getDoc.QueryRowContext(rctx, collection, id).Scan(&v, &raw)
	if errors.Is(err, sql.ErrNoRows) {
		if err := s.requireCollection(rctx, s.hasReading, collection); err != nil {
			return ports.Document{}, fmt.Errorf("get %q: %w", id, err)
		}
		return ports.Document{}, fmt.Errorf("get %q in %q: %w", id, collection, ports.ErrNotFound)
	}
	if err != nil {
		return ports.Document{}, fmt.Errorf("get %q in %q of %s: %w", id, collection, s.path, err)
	}
	data, err := docjson.Decode([]byte(raw))
	if err != nil {
		return ports.Document{}, fmt.Errorf("get %q in %q of %s: %w", id, collection, s.path, err)
	}
	return ports.Document{ID: id, Version: v, Data: data}, nil
}

// Delete removes the document if cond holds.
func (s *Store) Delete(ctx context.Context, collection, id string, cond ports.Cond) error {
	if err := checkDoc(collection, id); err != nil {
		return err
	}
	return s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := s.requireCollection(ctx, tx.StmtContext(ctx, s.hasWriting), collection); err != nil {
			return fmt.Errorf("delete %q: %w", id, err)
		}
		cur, err := s.version(ctx, tx, collection, id)
		if err != nil {
			return err
		}
		if cur == 0 {
			return fmt.Errorf("delete %q in %q: %w", id, collection, ports.ErrNotFound)
		}
		if want, ok := cond.Version(); ok && want != cur {
			return fmt.Errorf("delete %q in %q at version %d, stored %d: %w", id, collection, want, cur, ports.ErrConflict)
		}
		if _, err := tx.StmtContext(ctx, s.remove).ExecContext(ctx, collection, id); err != nil {
			return fmt.Errorf("delete %q in %q of %s: %w", id, collection, s.path, err)
		}
		return nil
	})
}

// path is the JSON path of a top-level field; storecheck.Field keeps quotes
// out of names, so quoting cannot be escaped.
func path(field string) string { return `$."` + field + `"` }

// whereSQL turns conditions into SQL on canonical JSON: json_type keeps
// true from matching 1 and "1" from matching 1, as in every adapter. A
// number is compared as a REAL: SQLite reads an integer of JSON as a 64-bit
// integer, and one past 2^53 (2116178168839186400, as JSON writes the
// float 2116178168839186432) is then another number than the float stored.
func whereSQL(where []docjson.Where) (string, []any) {
	var (
		b    strings.Builder
		args []any
	)
	for i, w := range where {
		p, v := fmt.Sprintf(":w%d", i), fmt.Sprintf(":v%d", i)
		args = append(args, sql.Named(p[1:], path(w.Field)))
		switch x := w.Value.(type) {
		case nil:
			fmt.Fprintf(&b, " AND json_type(data, %s) = 'null'", p)
		case bool:
			fmt.Fprintf(&b, " AND json_type(data, %s) = '%t'", p, x)
		case float64:
			fmt.Fprintf(&b, " AND json_type(data, %s) IN ('integer', 'real') AND CAST(json_extract(data, %s) AS REAL) = %s", p, p, v)
			args = append(args, sql.Named(v[1:], x))
		case string:
			fmt.Fprintf(&b, " AND json_type(data, %s) = 'text' AND json_extract(data, %s) = %s", p, p, v)
			args = append(args, sql.Named(v[1:], x))
		case []any:
			fmt.Fprintf(&b, " AND json_type(data, %s) = 'array' AND json_extract(data, %s) = %s", p, p, v)
			args = append(args, sql.Named(v[1:], w.JSON))
		default:
			fmt.Fprintf(&b, " AND json_type(data, %s) = 'object' AND json_extract(data, %s) = %s", p, p, v)
			args = append(args, sql.Named(v[1:], w.JSON))
		}
	}
	return b.String(), args
}

// The order key of docjson in SQL, for the field at :order. A number is
// taken as a REAL, as in whereSQL, so a page's cursor holds the number its
// last document holds.
const (
	rankSQL = `CASE json_type(data, :order) WHEN 'true' THEN 1 WHEN 'false' THEN 1
		WHEN 'integer' THEN 2 WHEN 'real' THEN 2 WHEN 'text' THEN 3
		WHEN 'array' THEN 4 WHEN 'object' THEN 4 ELSE 0 END`
	numSQL = `CASE json_type(data, :order) WHEN 'true' THEN 1.0 WHEN 'object' THEN 1.0
		WHEN 'integer' THEN CAST(json_extract(data, :order) AS REAL) WHEN 'real' THEN json_extract(data, :order) ELSE 0.0 END`
	strSQL = `CASE WHEN json_type(data, :order) = 'text' THEN json_extract(data, :order) ELSE '' END`
)

// Find pages by the order key: the cursor holds the last document's key,
// and the next page starts strictly after it. Whether the collection
// exists is asked after the query, and only when it found nothing: a
// document found shows the collection was there when the query read it (a
// drop deletes both in one transaction), where a check made before could
// pass, and a drop then leave the query an empty page of a collection that
// never was there and empty. Count does the same.
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
	cond, args := whereSQL(where)
	args = append(args, sql.Named("collection", collection), sql.Named("limit", limit+1))
	rank, num, str := "0", "0.0", "''"
	if q.OrderBy != "" {
		rank, num, str = rankSQL, numSQL, strSQL
		args = append(args, sql.Named("order", path(q.OrderBy)))
	}
	dir, cmp := "ASC", ">"
	if q.Desc {
		dir, cmp = "DESC", "<"
	}
	page := ""
	if hasCursor {
		page = fmt.Sprintf("WHERE (r, n, s, id) %s (:r, :n, :s, :id)", cmp)
		args = append(args, sql.Named("r", after.Rank), sql.Named("n", after.Num), sql.Named("s", after.Str), sql.Named("id", after.ID))
	}
	query := fmt.Sprintf(`SELECT id, version, data, r, n, s FROM (
			SELECT id, version, data, %s AS r, %s AS n, %s AS s FROM documents
			WHERE collection = :collection%s
		) %s ORDER BY r %s, n %s, s %s, id %s LIMIT :limit`,
		rank, num, str, cond, page, dir, dir, dir, dir)
	rows, err := s.db.Read.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, "", fmt.Errorf("find in %q of %s: %w", collection, s.path, err)
	}
	defer rows.Close()
	var (
		docs []ports.Document
		keys []docjson.Key
	)
	for rows.Next() {
		var (
			d   ports.Document
			raw string
			k   docjson.Key
		)
		if err := rows.Scan(&d.ID, &d.Version, &raw, &k.Rank, &k.Num, &k.Str); err != nil {
			return nil, "", fmt.Errorf("find in %q of %s: %w", collection, s.path, err)
		}
		if d.Data, err = docjson.Decode([]byte(raw)); err != nil {
			return nil, "", fmt.Errorf("find in %q of %s: document %q: %w", collection, s.path, d.ID, err)
		}
		k.ID = d.ID
		docs, keys = append(docs, d), append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("find in %q of %s: %w", collection, s.path, err)
	}
	if len(docs) == 0 {
		if err := s.requireCollection(ctx, s.hasReading, collection); err != nil {
			return nil, "", fmt.Errorf("find: %w", err)
		}
	}
	if len(docs) <= limit {
		return docs, "", nil
	}
	return docs[:limit], docjson.EncodeCursor(q, keys[limit-1]), nil
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
	cond, args := whereSQL(conds)
	args = append(args, sql.Named("collection", collection))
	var n int
	if err := s.db.Read.QueryRowContext(ctx, "SELECT count(*) FROM documents WHERE collection = :collection"+cond, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count in %q of %s: %w", collection, s.path, err)
	}
	if n == 0 {
		if err := s.requireCollection(ctx, s.hasReading, collection); err != nil {
			return 0, fmt.Errorf("count: %w", err)
		}
	}
	return n, nil
}
