package sqlite

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/abi-engine/engine/internal/sqlitedb/sqlitedbtest"
	"github.com/abi-engine/engine/ports"
)

// A put SQLite has no room for (a full disk, or a page limit) is refused as
// ports.ErrStorageFull, which the API answers 507, and what the file held
// stays. Before, it was a 500 like any other failure.
func TestAPutIntoAFullFileIsRefusedAsStorageFull(t *testing.T) {
	s := openCollection(t)
	text := strings.Repeat("t", 3000)
	sqlitedbtest.FullFileRefusesWrites(t, s.db.Write,
		func(i int) error {
			_, err := s.Put(t.Context(), "c", fmt.Sprintf("d%02d", i), map[string]any{"text": text}, ports.Cond{})
			return err
		},
		func(i int) bool {
			d, err := s.Get(t.Context(), "c", fmt.Sprintf("d%02d", i))
			return err == nil && d.Data["text"] == text
		})
}

// A put of a new term whose raise of the fence SQLite has no room for is
// refused as ports.ErrStorageFull, as a put that itself found no room is,
// and wrote nothing. Before, the raise's failure was not marked, and the
// API answered 500. The file is held at its pages and the fence's table is
// filled with rows of other stores, each as long as the store's own, until
// one finds no room: the store's row then needs a page it cannot have.
func TestAPutWhoseRaiseOfTheFenceFindsAFullFileIsRefusedAsStorageFull(t *testing.T) {
	s := openCollection(t)
	ctx := t.Context()
	sqlitedbtest.FillFenceTable(t, s.db.Write, "document")
	_, err := s.Put(ports.WithFencingToken(ctx, 1), "c", "d", map[string]any{"a": 1}, ports.Cond{})
	if !errors.Is(err, ports.ErrStorageFull) {
		t.Fatalf("a put whose raise of the fence found the file full: %v, want ports.ErrStorageFull", err)
	}
	if _, err := s.Get(ctx, "c", "d"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Get of the put refused as storage full: %v, want ErrNotFound", err)
	}
}
