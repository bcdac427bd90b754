// Package sqlitedbtest holds the checks the SQLite stores share in their
// tests.
package sqlitedbtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/abi-engine/engine/internal/sqlitedb"
	"github.com/abi-engine/engine/ports"
)

// WriteWaitsForTheTurn checks that a store's write queues for db's turn
// under its caller's context: run while another write holds the turn, write
// gives up by its own deadline, not done (ports.ErrNotDone), and leaves
// nothing written (landed reports false); run again once the turn ends, it
// lands.
func WriteWaitsForTheTurn(t *testing.T, db *sqlitedb.DB, write func(context.Context) error, landed func() bool) {
	t.Helper()
	_, end, err := db.WriteTurn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := write(ctx); !errors.Is(err, ports.ErrNotDone) {
		end()
		t.Fatalf("a write while another holds the turn: %v, want ports.ErrNotDone by its deadline", err)
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

// AWriteThatNeverHadItsTurnIsNotDone checks that a store's write that gives
// up while another write holds db's turn is ports.ErrNotDone, and leaves
// nothing written (landed reports false): one whose caller has gone, with
// its context's error too, and one whose answer is due (ports.WithAnswerBy)
// before its context ends, at that moment rather than at its deadline.
func AWriteThatNeverHadItsTurnIsNotDone(t *testing.T, db *sqlitedb.DB, write func(context.Context) error, landed func() bool) {
	t.Helper()
	_, end, err := db.WriteTurn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(end)
	gone, cancel := context.WithCancel(t.Context())
	cancel()
	if err := write(gone); !errors.Is(err, ports.ErrNotDone) || !errors.Is(err, context.Canceled) {
		t.Fatalf("a write whose caller had gone while another held the turn: %v, want ports.ErrNotDone and its context's error", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := write(ports.WithAnswerBy(ctx, time.Now().Add(300*time.Millisecond))); !errors.Is(err, ports.ErrNotDone) || ctx.Err() != nil {
		t.Fatalf("a write whose answer came due while another held the turn: %v (its context: %v), want ports.ErrNotDone before its deadline", err, ctx.Err())
	}
	if landed() {
		t.Fatal("a write that never had its turn was written")
	}
}
