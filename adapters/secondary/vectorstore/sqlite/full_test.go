package sqlite

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/abi-engine/engine/internal/sqlitedb/sqlitedbtest"
	"github.com/abi-engine/engine/ports"
)

// An upsert SQLite has no room for (a full disk, or a page limit) is
// refused as ports.ErrStorageFull, which the API answers 507, and what the
// file held stays. Before, it was a 500 like any other failure.
func TestAnUpsertIntoAFullFileIsRefusedAsStorageFull(t *testing.T) {
	s := openLoaded(t, filepath.Join(t.TempDir(), "vectors.sqlite"))
	const dim = 750 // 3000 bytes a vector
	if err := s.CreateCollection(t.Context(), "v", dim, ports.MetricEuclid); err != nil {
		t.Fatalf("CreateCollection: %v", err)
	}
	values := func(i int) []float32 {
		v := make([]float32, dim)
		for j := range v {
			v[j] = float32(i*dim + j)
		}
		return v
	}
	// The statement of a one-vector upsert is prepared before the file is
	// held to one connection, which the write's transaction then holds.
	if err := s.Upsert(t.Context(), "v", []ports.Vector{{ID: "first", Values: values(-1)}}); err != nil {
		t.Fatalf("Upsert: %v", err)
	}
	s.db.SetMaxOpenConns(1)
	sqlitedbtest.FullFileRefusesWrites(t, s.db,
		func(i int) error {
			return s.Upsert(t.Context(), "v", []ports.Vector{{ID: fmt.Sprintf("v%02d", i), Values: values(i), Payload: map[string]any{"i": i}}})
		},
		func(i int) bool {
			v, err := s.Get(t.Context(), "v", fmt.Sprintf("v%02d", i))
			return err == nil && v.Values[dim-1] == values(i)[dim-1] && v.Payload["i"] == float64(i)
		})
}
