// Package sqlitedbtest holds the checks the SQLite stores share in their
// tests.
package sqlitedbtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/abi-engine/engine/internal/sqlitedb"
)

// WriteWaitsForTheTurn checks that a store's write queues for db's turn
// under its caller's context: run while another write holds the turn, write
// gives up at its own deadline and leaves nothing written (landed reports
// false); run again once the turn ends, it lands.
func WriteWaitsForTheTurn(t *testing.T, db *sqlitedb.DB, write func(context.Context) error, landed func() bool) {
	t.Helper()
	_, end, err := db.WriteTurn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := write(ctx); !errors.Is(err, context.DeadlineExceeded) {
		end()
		t.Fatalf("a write while another holds the turn: %v, want its deadline", err)
	}
	end()
	if landed() {
		t.Fatal("the write that gave up in the queue was written")
	}
	ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := write(ctx); err != nil {
		t.Fatalf("the write once the turn ended: %v", err)
	}
	if !landed() {
		t.Fatal("the write once the turn ended was not written")
	}
}
