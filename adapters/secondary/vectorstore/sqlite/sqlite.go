// Package sqlite is a vector store in one SQLite file (modernc.org/sqlite,
// no cgo). Search is exact: it scores every row of the collection in Go,
// which suits the thousands of vectors of a development or single-host
// setup. The data stays on this host.
package sqlite

import (
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/abi-engine/engine/adapters/secondary/vectorstore/internal/vecutil"
	"github.com/abi-engine/engine/ports"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// Config is the block under services.vector_store.config.
type Config struct {
	// Path is the SQLite file; its directory is created when missing.
	Path string `yaml:"path"`
}

// LocalStorage implements ports.StorageConfig: the file stays on this host.
func (c Config) LocalStorage() string { return "SQLite at " + c.Path }

// Default puts an empty Path at vectors.sqlite under the data directory, written so
// it reads as the user wrote the directory ("./.engine/vectors.sqlite").
func (c *Config) Default(dataDir string) {
	if c.Path == "" {
		c.Path = strings.TrimRight(dataDir, "/") + "/vectors.sqlite"
	}
}

// Store is one handle on the file. Several handles, in one process or
// several, may share a file: writes take SQLite's write lock up front and
// wait for it.
type Store struct {
	db *sql.DB
}

var _ ports.VectorStore = (*Store)(nil)

const schema = `
CREATE TABLE IF NOT EXISTS vector_collections (
	name      TEXT PRIMARY KEY,
	dimension INTEGER NOT NULL,
	metric    TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS vectors (
	collection TEXT NOT NULL,
	id         TEXT NOT NULL,
	vec        BLOB NOT NULL,
	payload    TEXT,
	PRIMARY KEY (collection, id)
) WITHOUT ROWID;`

// Open opens or creates the file and its tables.
func Open(ctx context.Context, c Config) (*Store, error) {
	if c.Path == "" {
		return nil, fmt.Errorf("vector_store sqlite: path is empty: %w", ports.ErrInvalidArgument)
	}
	// The driver reads its options after the first "?", so a path holding
	// one would be cut short.
	if strings.ContainsRune(c.Path, '?') {
		return nil, fmt.Errorf("vector_store sqlite: path %q contains '?': %w", c.Path, ports.ErrInvalidArgument)
	}
	if err := os.MkdirAll(filepath.Dir(c.Path), 0o750); err != nil {
		return nil, fmt.Errorf("vector_store sqlite: path %q: %w", c.Path, err)
	}
	// WAL lets readers run beside a writer; _txlock=immediate takes the
	// write lock when a transaction begins, so two handles never deadlock
	// upgrading a read lock, and busy_timeout makes them wait for it.
	dsn := c.Path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("vector_store sqlite: open %q: %w", c.Path, err)
	}
	if _, err := db.ExecContext(ctx, schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("vector_store sqlite: create tables in %q: %w", c.Path, err)
	}
	return &Store{db: db}, nil
}

// Close closes the handle's connections.
func (s *Store) Close() error { return s.db.Close() }

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// collection reads a collection's settings, or ErrNotFound.
func collection(ctx context.Context, q querier, name string) (int, ports.Metric, error) {
	var dim int
	var metric string
	err := q.QueryRowContext(ctx, `SELECT dimension, metric FROM vector_collections WHERE name = ?`, name).Scan(&dim, &metric)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, "", fmt.Errorf("collection %q: %w", name, ports.ErrNotFound)
	}
	if err != nil {
		return 0, "", fmt.Errorf("read collection %q: %w", name, err)
	}
	return dim, ports.Metric(metric), nil
}

// inTx runs f in a transaction that holds the write lock from its start.
func (s *Store) inTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := f(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

func (s *Store) CreateCollection(ctx context.Context, name string, dimension int, metric ports.Metric) error {
	if err := vecutil.CheckCollection(name, dimension, metric); err != nil {
		return err
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		dim, m, err := collection(ctx, tx, name)
		switch {
		case err == nil && (dim != dimension || m != metric):
			return fmt.Errorf("collection %q exists with dimension %d and metric %s, not %d and %s: %w",
				name, dim, m, dimension, metric, ports.ErrConflict)
		case err == nil:
			return nil
		case !errors.Is(err, ports.ErrNotFound):
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO vector_collections (name, dimension, metric) VALUES (?, ?, ?)`,
			name, dimension, string(metric)); err != nil {
			return fmt.Errorf("create collection %q: %w", name, err)
		}
		return nil
	})
}

func (s *Store) DeleteCollection(ctx context.Context, name string) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM vector_collections WHERE name = ?`, name)
		if err != nil {
			return fmt.Errorf("delete collection %q: %w", name, err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return fmt.Errorf("delete collection %q: %w", name, ports.ErrNotFound)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM vectors WHERE collection = ?`, name); err != nil {
			return fmt.Errorf("delete the vectors of %q: %w", name, err)
		}
		return nil
	})
}

func (s *Store) Collections(ctx context.Context) ([]ports.VectorCollection, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, dimension, metric FROM vector_collections ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list collections: %w", err)
	}
	defer rows.Close()
	out := []ports.VectorCollection{}
	for rows.Next() {
		var c ports.VectorCollection
		var metric string
		if err := rows.Scan(&c.Name, &c.Dimension, &metric); err != nil {
			return nil, fmt.Errorf("list collections: %w", err)
		}
		c.Metric = ports.Metric(metric)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list collections: %w", err)
	}
	return out, nil
}

func (s *Store) Upsert(ctx context.Context, name string, vectors []ports.Vector) error {
	type row struct {
		id      string
		vec     []byte
		payload sql.NullString
	}
	rows := make([]row, len(vectors))
	for i, v := range vectors {
		rows[i] = row{id: v.ID, vec: encode(v.Values)}
		if len(v.Payload) > 0 {
			p, err := vecutil.NormalizePayload(v.Payload)
			if err != nil {
				return fmt.Errorf("upsert %q into %q: %w", v.ID, name, err)
			}
			b, _ := json.Marshal(p) // a normalised payload always marshals
			rows[i].payload = sql.NullString{String: string(b), Valid: true}
		}
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		dim, _, err := collection(ctx, tx, name)
		if err != nil {
			return err
		}
		if err := vecutil.CheckVectors(name, dim, vectors); err != nil {
			return err
		}
		stmt, err := tx.PrepareContext(ctx, `INSERT INTO vectors (collection, id, vec, payload) VALUES (?, ?, ?, ?)
			ON CONFLICT (collection, id) DO UPDATE SET vec = excluded.vec, payload = excluded.payload`)
		if err != nil {
			return fmt.Errorf("upsert into %q: %w", name, err)
		}
		defer stmt.Close()
		for _, r := range rows {
			if _, err := stmt.ExecContext(ctx, name, r.id, r.vec, r.payload); err != nil {
				return fmt.Errorf("upsert %q into %q: %w", r.id, name, err)
			}
		}
		return nil
	})
}

func (s *Store) Search(ctx context.Context, name string, query []float32, k int, filter map[string]any) ([]ports.ScoredVector, error) {
	f, err := vecutil.NewFilter(filter)
	if err != nil {
		return nil, fmt.Errorf("search %q: %w", name, err)
	}
	dim, metric, err := collection(ctx, s.db, name)
	if err != nil {
		return nil, err
	}
	if err := vecutil.CheckSearch(name, dim, query, k); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, `SELECT id, vec, payload FROM vectors WHERE collection = ?`, name)
	if err != nil {
		return nil, fmt.Errorf("search %q: %w", name, err)
	}
	defer rows.Close()
	top := vecutil.NewTopK(metric, k)
	values := make([]float32, dim)
	for rows.Next() {
		var id string
		var blob []byte
		var payload sql.NullString
		if err := rows.Scan(&id, &blob, &payload); err != nil {
			return nil, fmt.Errorf("search %q: %w", name, err)
		}
		if err := decodeInto(values, blob); err != nil {
			return nil, fmt.Errorf("search %q: vector %q: %w", name, id, err)
		}
		score := vecutil.Score(metric, query, values)
		// Rows that would not make the top k are never decoded further.
		if !top.Offer(score) {
			continue
		}
		p, err := decodePayload(payload)
		if err != nil {
			return nil, fmt.Errorf("search %q: vector %q: %w", name, id, err)
		}
		if !f.Match(p) {
			continue
		}
		top.Add(ports.ScoredVector{Vector: ports.Vector{ID: id, Values: append([]float32(nil), values...), Payload: p}, Score: score})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("search %q: %w", name, err)
	}
	return top.Sorted(), nil
}

func (s *Store) Get(ctx context.Context, name, id string) (ports.Vector, error) {
	dim, _, err := collection(ctx, s.db, name)
	if err != nil {
		return ports.Vector{}, err
	}
	var blob []byte
	var payload sql.NullString
	err = s.db.QueryRowContext(ctx, `SELECT vec, payload FROM vectors WHERE collection = ? AND id = ?`, name, id).Scan(&blob, &payload)
	if errors.Is(err, sql.ErrNoRows) {
		return ports.Vector{}, fmt.Errorf("vector %q in %q: %w", id, name, ports.ErrNotFound)
	}
	if err != nil {
		return ports.Vector{}, fmt.Errorf("get %q from %q: %w", id, name, err)
	}
	values := make([]float32, dim)
	if err := decodeInto(values, blob); err != nil {
		return ports.Vector{}, fmt.Errorf("get %q from %q: %w", id, name, err)
	}
	p, err := decodePayload(payload)
	if err != nil {
		return ports.Vector{}, fmt.Errorf("get %q from %q: %w", id, name, err)
	}
	return ports.Vector{ID: id, Values: values, Payload: p}, nil
}

func (s *Store) Delete(ctx context.Context, name string, ids []string) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if _, _, err := collection(ctx, tx, name); err != nil {
			return err
		}
		for _, id := range ids {
			if _, err := tx.ExecContext(ctx, `DELETE FROM vectors WHERE collection = ? AND id = ?`, name, id); err != nil {
				return fmt.Errorf("delete %q from %q: %w", id, name, err)
			}
		}
		return nil
	})
}

func (s *Store) Count(ctx context.Context, name string) (int, error) {
	if _, _, err := collection(ctx, s.db, name); err != nil {
		return 0, err
	}
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM vectors WHERE collection = ?`, name).Scan(&n); err != nil {
		return 0, fmt.Errorf("count %q: %w", name, err)
	}
	return n, nil
}

// encode stores a vector as little-endian float32s.
func encode(values []float32) []byte {
	b := make([]byte, 4*len(values))
	for i, x := range values {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// decodeInto reads a stored vector into dst, which has the collection's
// dimension.
func decodeInto(dst []float32, b []byte) error {
	if len(b) != 4*len(dst) {
		return fmt.Errorf("stored vector has %d bytes, want %d", len(b), 4*len(dst))
	}
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return nil
}

func decodePayload(p sql.NullString) (map[string]any, error) {
	if !p.Valid {
		return nil, nil
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(p.String), &out); err != nil {
		return nil, fmt.Errorf("stored payload: %w", err)
	}
	return out, nil
}
