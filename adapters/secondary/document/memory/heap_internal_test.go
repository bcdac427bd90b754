package memory

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/internal/maxbytes/maxbytestest"
	"github.com/abi-engine/engine/ports"
)

// What a store counts against max_bytes is no less than the heap it holds
// for its documents and collections: small documents in one collection,
// empty collections, and collections of one document each. Before, a
// collection counted its name and 128 bytes of upkeep, and collections of
// one document held 2.2 times what they counted, as a collection's first
// document brings the shard that holds it. Where the store holds
// documents it also counts no more than four times the heap, so that it
// does not fill far short of its bound; an empty collection counts the
// shard it has yet to make.
func TestTheBoundCountsNoLessThanTheHeapTheStoreHolds(t *testing.T) {
	for _, shape := range []struct {
		name                string
		collections, inEach int
	}{
		{"small documents in one collection", 1, 20_000},
		{"empty collections", 5_000, 0},
		{"collections of one document", 5_000, 1},
	} {
		t.Run(shape.name, func(t *testing.T) {
			names := make([]string, max(shape.collections, shape.inEach))
			for i := range names {
				names[i] = fmt.Sprintf("n%06d", i)
			}
			before := maxbytestest.Live()
			s, err := Open(t.Context(), Config{MaxBytes: 1 << 40})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for _, c := range names[:shape.collections] {
				if err := s.EnsureCollection(t.Context(), c); err != nil {
					t.Fatal(err)
				}
				for i, id := range names[:shape.inEach] {
					if _, err := s.Put(t.Context(), c, id, map[string]any{"n": float64(i)}, ports.Cond{}); err != nil {
						t.Fatal(err)
					}
				}
			}
			held := maxbytestest.Live() - before
			runtime.KeepAlive(names)
			t.Logf("counted %d bytes, the heap holds %d", s.used, held)
			if shape.inEach == 0 {
				// An empty collection counts the shard it has yet to
				// make, some six times the little it holds.
				if held > s.used {
					t.Errorf("%d empty collections hold %d bytes of heap and count %d against max_bytes", shape.collections, held, s.used)
				}
			} else {
				maxbytestest.Check(t, held, s.used)
			}
			runtime.KeepAlive(s)
		})
	}
}
