package vecindex

import (
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/abi-engine/engine/internal/logbuf"
	"github.com/abi-engine/engine/ports"
)

// A panic while the graph is built, on the builder's own goroutine, does
// not end the process: the half-built graph is dropped, the panic is
// logged with its stack, and every search is exact from then on, finding
// every vector, the ones the graph never held included. Before, it ended
// the process, and with it an engine holding the lease.
func TestAPanicWhileTheGraphIsBuiltLeavesTheIndexSearchedExactly(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const dim = 8
	entries := randomEntries(r, 300, dim)
	var log logbuf.Buffer
	x := New(dim, ports.MetricEuclid, Options{Threshold: 100, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	t.Cleanup(x.Close)
	inserts := 0
	x.hooks.insert = func(int32) {
		if inserts++; inserts == 150 {
			panic("a broken vector")
		}
	}
	x.Put(entries)
	x.wg.Wait() // the builder has given up, or finished
	if x.Approximate() {
		t.Fatal("the index searches through a graph whose build panicked")
	}
	if got := log.String(); !strings.Contains(got, "a broken vector") || !strings.Contains(got, "stack=") {
		t.Fatalf("the panic was not logged with its stack; the log holds %q", got)
	}
	for _, e := range entries {
		got := x.Search(e.Values, 1, nil)
		if len(got) == 0 || got[0].ID != e.ID || got[0].Distance != 0 {
			t.Fatalf("a search for %s after the panic finds %+v, want it first at distance 0", e.ID, got)
		}
	}
	// More writes start no builder again, which would panic again.
	x.Put(randomEntries(rand.New(rand.NewPCG(9, 10)), 50, dim))
	x.wg.Wait()
	if x.Approximate() || x.Len() != 300 {
		t.Fatalf("after more puts: approximate %v with %d vectors, want exact with 300", x.Approximate(), x.Len())
	}
}
