package sqlite

import (
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
