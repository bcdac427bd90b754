package sqlite_test

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/vectorstore/sqlite"
	"github.com/abi-engine/engine/ports"
)

// building reports whether some goroutine is putting vectors into an HNSW
// graph.
func building() bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Contains(string(buf[:n]), "vecindex.(*Index).build")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// A handle closed while it still loads its indexes at open leaves no graph
// builder behind: the load that Close cuts short drops an index that has
// already grown past the threshold, and that index's builder must stop
// with it rather than go on putting vectors into a graph nobody holds.
func TestClosingWhileTheIndexesLoadLeavesNoGraphBuilderRunning(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vectors.sqlite")
	w, err := sqlite.Open(t.Context(), sqlite.Config{Path: path, IndexThreshold: -1})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := w.CreateCollection(t.Context(), "v", 4, ports.MetricEuclid); err != nil {
		t.Fatalf("CreateCollection: %v", err)
	}
	const total, batch = 100_000, 2000
	for i := 0; i < total; i += batch {
		vs := make([]ports.Vector, batch)
		for j := range vs {
			n := float32(i + j)
			vs[j] = ports.Vector{ID: fmt.Sprintf("v%06d", i+j), Values: []float32{n, n * 0.5, -n, 1}}
		}
		if err := w.Upsert(t.Context(), "v", vs); err != nil {
			t.Fatalf("Upsert: %v", err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close the writer: %v", err)
	}
	if building() {
		t.Fatalf("a graph builder runs before the second handle opens")
	}

	s, err := sqlite.Open(t.Context(), sqlite.Config{Path: path, IndexThreshold: 64})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	// The load has put more than the threshold into the index once its
	// builder runs, and is still reading the rest.
	for deadline := time.Now().Add(time.Minute); !building(); {
		if time.Now().After(deadline) {
			s.Close()
			t.Fatalf("no graph builder started within a minute of the open")
		}
		runtime.Gosched()
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if building() {
		t.Errorf("a graph builder still runs after Close returned")
	}
}
