package sqlitedbtest

import (
	"database/sql"
	"errors"
	"fmt"
	"testing"

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
