// Package sqlitedb opens the SQLite files of the local storage adapters the
// same way, so that several handles on one file, in one process or many,
// wait for each other instead of failing with "database is locked".
package sqlitedb

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/abi-engine/engine/ports"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// dsnOptions apply to every connection: writers wait up to 10 s for the
// lock, readers never block writers (WAL), and transactions take the write
// lock when they begin, so a read-then-write transaction cannot lose its
// snapshot half way.
const dsnOptions = "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"

// Open opens the file at path, creating it and its directory if missing,
// and runs schema, which must be idempotent. what names the adapter in
// errors, such as "keyvalue sqlite".
func Open(ctx context.Context, what, path, schema string) (*sql.DB, error) {
	if path == "" {
		return nil, fmt.Errorf("%s: path is empty: %w", what, ports.ErrInvalidArgument)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("%s: create the directory of %s: %w", what, path, err)
	}
	db, err := sql.Open("sqlite", path+dsnOptions)
	if err != nil {
		return nil, fmt.Errorf("%s: open %s: %w", what, path, err)
	}
	if _, err := db.ExecContext(ctx, schema); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("%s: create tables in %s: %w", what, path, err)
	}
	return db, nil
}
