package sqlitedbtest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/abi-engine/engine/internal/sqlitedb"
	"github.com/abi-engine/engine/ports"
)

// FullFileRefusesWrites caps db's file at the pages it has (a page limit
// on the writer's connection, which SQLite enforces as it would a full
// disk), then writes, each needing a page more than the last, until one is
// refused. It fails the test unless that refusal is ports.ErrStorageFull
// and stored reads back every write made before it.
func FullFileRefusesWrites(t *testing.T, db *sqlitedb.DB, write func(i int) error, stored func(i int) bool) {
	t.Helper()
	var pages int
	if err := db.Write.QueryRowContext(t.Context(), "PRAGMA page_count").Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Write.ExecContext(t.Context(), fmt.Sprintf("PRAGMA max_page_count = %d", pages+2)); err != nil {
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
