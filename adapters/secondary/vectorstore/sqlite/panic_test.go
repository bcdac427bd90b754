package sqlite

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/abi-engine/engine/internal/logbuf"
	"github.com/abi-engine/engine/ports"
)

// A panic while a collection is read into its index, on the load at open,
// which runs on a goroutine of its own, does not end the process: the
// index it left part loaded is dropped, and the next search loads the
// collection whole and finds every vector. A panic while a search catches
// up fails that search with an error, and the one after answers in full.
// Before, the panic at open ended the process, and with it an engine
// holding the lease.
func TestAPanicWhileAnIndexLoadsFailsTheLoadNotTheProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vectors.sqlite")
	w := writeCollection(t, path)
	ctx := t.Context()
	s, panics := openPanicking(t, Config{Path: path, IndexThreshold: 64})
	if panics.Load() != 0 {
		t.Fatal("the load at open did not read the collection")
	}
	all := func() error {
		got, err := s.Search(ctx, "v", []float32{0, 0}, 200, nil)
		if err != nil {
			return err
		}
		if len(got) != 200 || got[0].ID != "v000" || got[199].ID != "v199" {
			return fmt.Errorf("a search for every vector finds %d", len(got))
		}
		return nil
	}
	if err := all(); err != nil {
		t.Fatalf("after the load at open panicked: %v", err)
	}
	// A write through the other handle: s's next search catches up.
	if err := w.Upsert(ctx, "v", []ports.Vector{{ID: "v000", Values: []float32{0, 0}}}); err != nil {
		t.Fatalf("Upsert: %v", err)
	}
	panics.Store(1)
	if err := all(); !errors.Is(err, errLoadPanicked) {
		t.Fatalf("a search whose catch-up panicked answers %v, want an error of the panic", err)
	}
	if err := all(); err != nil {
		t.Fatalf("the search after the one whose catch-up panicked: %v", err)
	}
}

// The panics of a collection read into its index, at the load at open and
// at a search's catch-up, are logged on the store's Logger, with its
// attributes, such as the engine's instance id, and their stacks. Before,
// they went to slog.Default(), without them.
func TestAPanicWhileAnIndexLoadsIsLoggedOnTheStoresLogger(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vectors.sqlite")
	w := openLoaded(t, path)
	ctx := t.Context()
	if err := w.CreateCollection(ctx, "v", 2, ports.MetricEuclid); err != nil {
		t.Fatalf("CreateCollection: %v", err)
	}
	if err := w.Upsert(ctx, "v", []ports.Vector{{ID: "a", Values: []float32{1, 0}}}); err != nil {
		t.Fatalf("Upsert: %v", err)
	}
	log, logs := logbuf.Logger(slog.LevelInfo)
	s, panics := openPanicking(t, Config{Path: path, Logger: log.With("instance", "e1")})
	// A write through the other handle: s's next search catches up.
	if err := w.Upsert(ctx, "v", []ports.Vector{{ID: "b", Values: []float32{0, 1}}}); err != nil {
		t.Fatalf("Upsert: %v", err)
	}
	panics.Store(1)
	if _, err := s.Search(ctx, "v", []float32{0, 0}, 2, nil); !errors.Is(err, errLoadPanicked) {
		t.Fatalf("a search whose catch-up panicked answers %v, want an error of the panic", err)
	}
	var logged int
	for line := range strings.Lines(logs.String()) {
		if !strings.Contains(line, "a broken row") {
			continue
		}
		logged++
		if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "instance=e1") || !strings.Contains(line, "stack=") {
			t.Errorf("a panic was logged without the store's attributes or its stack: %s", line)
		}
	}
	if logged != 2 {
		t.Fatalf("%d panics logged on the store's logger, want the 2 of the load at open and of the catch-up; it holds:\n%s", logged, logs.String())
	}
}

// openPanicking opens a handle on c whose reading of a collection into its
// index panics, "a broken row", as many times as panics holds: once, at
// the load at open, which it waits for.
func openPanicking(t *testing.T, c Config) (*Store, *atomic.Int32) {
	t.Helper()
	panics := new(atomic.Int32)
	panics.Store(1)
	s, err := open(t.Context(), c, syncHooks{catchUp: func(context.Context, string) {
		if panics.Add(-1) >= 0 {
			panic("a broken row")
		}
	}})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	<-s.loaded
	return s, panics
}
