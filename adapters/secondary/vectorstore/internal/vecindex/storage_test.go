package vecindex

import (
	"math/rand/v2"
	"testing"

	"github.com/abi-engine/engine/ports"
)

// held is how many float32s the index's storage holds, used or not.
func (x *Index) held() int {
	n := 0
	for _, c := range x.chunks {
		n += cap(c)
	}
	return n
}

// An index's storage grows with the vectors it holds: a vector of the
// largest dimension takes about its own size, not a block of 1024 such
// vectors. Before, the first vector of a collection took a whole block,
// 32 MiB at dimension 8192, so a caller making collections of one vector
// each, 44 KB a request, could make the engine hold 750 times as much and
// run it out of memory while it held the lease. Every vector put stays
// where it was as the storage grows.
func TestAnIndexHoldsStorageInProportionToItsVectors(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const dim = ports.MaxDimension
	x := New(dim, ports.MetricEuclid, Options{Threshold: -1})
	t.Cleanup(x.Close)
	entries := randomEntries(r, chunkSlots+3, dim)
	x.Put(entries[:1])
	if got := x.held(); got > 2*dim {
		t.Fatalf("one vector of dimension %d holds %d floats of storage, want at most %d", dim, got, 2*dim)
	}
	for i := 1; i < len(entries); i += 100 {
		x.Put(entries[i:min(i+100, len(entries))])
		if n, got := x.Len(), x.held(); got > 2*n*dim {
			t.Fatalf("%d vectors of dimension %d hold %d floats of storage, want at most %d", n, dim, got, 2*n*dim)
		}
	}
	for _, e := range entries[:5] {
		if got := x.Search(e.Values, 1, nil); len(got) == 0 || got[0].ID != e.ID || got[0].Distance != 0 {
			t.Fatalf("a search for %s after the storage grew finds %+v, want it first at distance 0", e.ID, got)
		}
	}
	for _, e := range entries[len(entries)-5:] {
		if got := x.Search(e.Values, 1, nil); len(got) == 0 || got[0].ID != e.ID || got[0].Distance != 0 {
			t.Fatalf("a search for %s after the storage grew finds %+v, want it first at distance 0", e.ID, got)
		}
	}
}
