package memory

import (
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/internal/maxbytes/maxbytestest"
)

// counted is a store that tells what it counts against max_bytes.
type counted struct{ *Store }

func (c counted) Used() int64 { return c.used }

// What a store counts against max_bytes is no less than the heap it holds
// for its entries; a value's size class, at most an eighth above its
// length, is not counted.
func TestTheBoundCountsNoLessThanTheHeapTheStoreHolds(t *testing.T) {
	maxbytestest.Entries(t, func(t *testing.T) maxbytestest.Store {
		s, err := Open(t.Context(), Config{MaxBytes: 1 << 40})
		if err != nil {
			t.Fatal(err)
		}
		return counted{s}
	})
}
