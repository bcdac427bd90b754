package sqlitedbtest

import (
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/abi-engine/engine/internal/sqlitedb"
	"github.com/abi-engine/engine/ports"
)

// FullFileRefusesWrites caps the file of writer, a pool of one connection
// that every write goes through, at the pages it has (a page limit on that
// connection, which SQLite enforces as it would a full disk), then writes,
// each needing room the last did not, until one is refused. It fails the
// test unless that refusal is ports.ErrStorageFull and stored reads back
// every write made before it.
func FullFileRefusesWrites(t *testing.T, writer *sql.DB, write func(i int) error, stored func(i int) bool) {
	t.Helper()
	var pages int
	if err := writer.QueryRowContext(t.Context(), "PRAGMA page_count").Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if _, err := writer.ExecContext(t.Context(), fmt.Sprintf("PRAGMA max_page_count = %d", pages+2)); err != nil {
		t.Fatal(err)
	}
	var err error
	n := 0
	for ; n < 100; n++ {
		if err = write(n); err != nil {
			break
		}
	}
	if n == 0 || !errors.Is(err, ports.ErrStorageFull) {
		t.Fatalf("write %d into a file held at %d pages: %v, want ports.ErrStorageFull once it is full", n, pages+2, err)
	}
	for i := range n {
		if !stored(i) {
			t.Fatalf("write %d, made before the file was full, is gone", i)
		}
	}
}

// FillFenceTable holds the file of writer, a pool of one connection that
// every write goes through, at the pages it has (a page limit on that
// connection), and fills the fence's table with rows of other stores until
// one finds no room. Each row is as long as scope, the store's, and sorts
// beside it ("kp000000" beside "keyvalue"), so that a raise of the store's
// fence then needs a page it cannot have.
func FillFenceTable(t *testing.T, writer *sql.DB, scope string) {
	t.Helper()
	ctx := t.Context()
	var pages int
	if err := writer.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if _, err := writer.ExecContext(ctx, fmt.Sprintf("PRAGMA max_page_count = %d", pages)); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		_, err := writer.ExecContext(ctx, "INSERT INTO abi_engine_fence (scope, token) VALUES (?, 1)", fmt.Sprintf("%cp%0*d", scope[0], len(scope)-2, i))
		if errors.Is(sqlitedb.Full(err), ports.ErrStorageFull) {
			return
		}
		if err != nil || i == 10_000 {
			t.Fatalf("fill the fence's table of a file held at %d pages, row %d: %v", pages, i, err)
		}
	}
}
