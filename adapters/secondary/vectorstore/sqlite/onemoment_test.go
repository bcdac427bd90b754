package sqlite_test

import (
	"context"
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
