package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/abi-engine/engine/ports"
)

// A set waits for the writer's turn under its caller's context: while
// another write of the handle holds the turn, a set gives up at its own
// deadline and leaves nothing written; once the turn ends, the same set
// lands.
func TestASetWaitsForTheWritersTurnUnderItsContext(t *testing.T) {
	s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "kv.sqlite")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	_, end, err := s.db.WriteTurn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := s.Set(ctx, "k", []byte("v"), 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a set while another write holds the turn: %v, want its deadline", err)
	}
	end()
	if _, err := s.Get(t.Context(), "k"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("the set that gave up left a value: %v", err)
	}
	ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := s.Set(ctx, "k", []byte("v"), 0); err != nil {
		t.Fatalf("the set once the turn ended: %v", err)
	}
	if v, err := s.Get(t.Context(), "k"); err != nil || string(v) != "v" {
		t.Fatalf("after the set: %q, %v", v, err)
	}
}
