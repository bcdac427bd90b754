package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/abi-engine/engine/ports"
)

// A put waits for the writer's turn under its caller's context: while
// another write of the handle holds the turn, a put gives up at its own
// deadline and leaves nothing written; once the turn ends, the same put
// lands.
func TestAPutWaitsForTheWritersTurnUnderItsContext(t *testing.T) {
	s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "documents.sqlite")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.EnsureCollection(t.Context(), "c"); err != nil {
		t.Fatal(err)
	}
	_, end, err := s.db.WriteTurn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	data := map[string]any{"n": 1.0}
	if _, err := s.Put(ctx, "c", "d", data, ports.Cond{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a put while another write holds the turn: %v, want its deadline", err)
	}
	end()
	if _, err := s.Get(t.Context(), "c", "d"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("the put that gave up left a document: %v", err)
	}
	ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	doc, err := s.Put(ctx, "c", "d", data, ports.Cond{})
	if err != nil || doc.Version != 1 {
		t.Fatalf("the put once the turn ended: %+v, %v", doc, err)
	}
}
