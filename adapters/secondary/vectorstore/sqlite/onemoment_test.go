package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/vectorstore/sqlite"
	"github.com/abi-engine/engine/ports"
)

// cycles is how many times the writer of these tests changes the file
// while readers read beside it.
const cycles = 300

// beside runs write, then closes done; meanwhile each of two readers calls
// read until done is closed, and the first reason read gives fails the
// test.
func beside(t *testing.T, write func(ctx context.Context) error, read func(ctx context.Context) error) {
	t.Helper()
	ctx := t.Context()
	done := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var wrong []error
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				if err := read(ctx); err != nil {
					mu.Lock()
					wrong = append(wrong, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	err := write(ctx)
	close(done)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if len(wrong) > 0 {
		t.Fatalf("%d readers got an answer no single moment of the file had; the first: %v", len(wrong), wrong[0])
	}
}

// A get beside a writer that drops a collection and makes it again, of
// another dimension, answers as the file stood at one moment: the vector
// as it was written (its payload names its dimension), or not found.
// Read in two statements, the collection's dimension and the vector's
// bytes could come from either side of a drop, and the get failed, as if
// the file were damaged, on a vector of three values read as one of two.
func TestAGetBesideADropAndACreateAnswersFromOneMoment(t *testing.T) {
	s, err := sqlite.Open(t.Context(), sqlite.Config{Path: filepath.Join(t.TempDir(), "vectors.sqlite")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	write := func(ctx context.Context) error {
		for i := range cycles {
			dim := 2 + i%2
			if err := s.DeleteCollection(ctx, "v"); err != nil && !errors.Is(err, ports.ErrNotFound) {
				return fmt.Errorf("drop %d: %w", i, err)
			}
			if err := s.CreateCollection(ctx, "v", dim, ports.MetricEuclid); err != nil {
				return fmt.Errorf("create %d: %w", i, err)
			}
			v := ports.Vector{ID: "x", Values: make([]float32, dim), Payload: map[string]any{"dim": float64(dim)}}
			if err := s.Upsert(ctx, "v", []ports.Vector{v}); err != nil {
				return fmt.Errorf("upsert %d: %w", i, err)
			}
		}
		return nil
	}
	read := func(ctx context.Context) error {
		v, err := s.Get(ctx, "v", "x")
		switch {
		case errors.Is(err, ports.ErrNotFound):
			return nil
		case err != nil:
			return err
		case v.Payload["dim"] != float64(len(v.Values)):
			return fmt.Errorf("a vector of %d values whose payload says %v", len(v.Values), v.Payload["dim"])
		}
		return nil
	}
	beside(t, write, read)
}

// A count beside a writer that drops a collection of five vectors, and
// makes it again with five in one transaction, answers as the file stood
// at one moment: five, or not found. Read in two statements, the
// collection could be found before a drop and its vectors counted after
// it, and the count answered 0 for a collection that never stood empty.
func TestACountBesideADropAnswersFromOneMoment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vectors.sqlite")
	s, err := sqlite.Open(t.Context(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	// The writer is another handle on the file, a tool's: the store's own
	// writes cannot make a collection and fill it in one transaction.
	tool, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tool.Close() })
	in := func(ctx context.Context, stmts ...string) error {
		tx, err := tool.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		for _, q := range stmts {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return tx.Commit()
	}
	filled := []string{"INSERT INTO vector_collections (name, dimension, metric) VALUES ('v', 1, 'euclid')"}
	for i := range 5 {
		filled = append(filled, fmt.Sprintf("INSERT INTO vectors (collection, id, vec) VALUES ('v', 'x%d', x'00000000')", i))
	}
	if err := in(t.Context(), filled...); err != nil {
		t.Fatal(err)
	}
	write := func(ctx context.Context) error {
		for i := range cycles {
			if err := in(ctx, "DELETE FROM vectors WHERE collection = 'v'", "DELETE FROM vector_collections WHERE name = 'v'"); err != nil {
				return fmt.Errorf("drop %d: %w", i, err)
			}
			if err := in(ctx, filled...); err != nil {
				return fmt.Errorf("make %d: %w", i, err)
			}
		}
		return nil
	}
	read := func(ctx context.Context) error {
		n, err := s.Count(ctx, "v")
		switch {
		case errors.Is(err, ports.ErrNotFound):
			return nil
		case err != nil:
			return err
		case n != 5:
			return fmt.Errorf("a count of %d for a collection that held five or was missing", n)
		}
		return nil
	}
	beside(t, write, read)
}
