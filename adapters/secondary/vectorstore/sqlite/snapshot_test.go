package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/vectorstore/sqlite"
	"github.com/abi-engine/engine/ports"
)

// A search that runs beside an upsert through the same handle answers as
// the collection stood either before the upsert or after it, never from a
// mix of the two. Each upsert moves the vector nearest the query far away
// and puts a new one there, so the nearest vector is always one of the
// moving ones: before the upsert the old one, after it the new one. An
// index that already holds the upsert searched against rows read before
// it finds the new vector (absent from the rows, so dropped) and not the
// old one (no longer near in the index), and answers with a filler.
func TestASearchBesideAnUpsertSeesTheCollectionBeforeOrAfterIt(t *testing.T) {
	s, err := sqlite.Open(t.Context(), sqlite.Config{Path: filepath.Join(t.TempDir(), "vectors.sqlite")})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := t.Context()
	if err := s.CreateCollection(ctx, "v", 1, ports.MetricEuclid); err != nil {
		t.Fatalf("CreateCollection: %v", err)
	}
	batch := []ports.Vector{{ID: "m0000", Values: []float32{0}}}
	for i := range 20 {
		batch = append(batch, ports.Vector{ID: fmt.Sprintf("filler%02d", i), Values: []float32{float32(100 + i)}})
	}
	if err := s.Upsert(ctx, "v", batch); err != nil {
		t.Fatalf("Upsert: %v", err)
	}
	const moves = 400
	write := func(ctx context.Context) error {
		for i := range moves {
			err := s.Upsert(ctx, "v", []ports.Vector{
				{ID: fmt.Sprintf("m%04d", i), Values: []float32{1000}},
				{ID: fmt.Sprintf("m%04d", i+1), Values: []float32{0}},
			})
			if err != nil {
				return fmt.Errorf("upsert move %d: %w", i, err)
			}
		}
		return nil
	}
	read := func(ctx context.Context) error {
		got, err := s.Search(ctx, "v", []float32{0}, 1, nil)
		switch {
		case err != nil:
			return err
		case len(got) != 1 || !strings.HasPrefix(got[0].ID, "m") || got[0].Values[0] != 0:
			return fmt.Errorf("a search answered from a mix of before and after an upsert: %+v", got)
		}
		return nil
	}
	beside(t, write, read)
}
