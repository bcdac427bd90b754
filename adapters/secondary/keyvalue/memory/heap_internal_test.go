package memory

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// liveHeap is the bytes of the heap still reachable, once collected.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// fill sets n keys of its own, each with a value of size bytes, and returns
// the store and the heap it holds for them, the keys included.
func fill(t *testing.T, n, size int, ttl time.Duration) (*Store, int64) {
	t.Helper()
	before := liveHeap()
	s, err := Open(t.Context(), Config{MaxBytes: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	value := make([]byte, size)
	for i := range n {
		if err := s.Set(t.Context(), fmt.Sprintf("key-%08d", i), value, ttl); err != nil {
			t.Fatal(err)
		}
	}
	return s, liveHeap() - before
}

// What a store counts against max_bytes is no less than the heap it holds
// for its entries, small ones above all, whose upkeep is most of them; a
// value's size class, at most an eighth above its length, is not counted.
// It also counts no more than four times the heap, so that a store does
// not fill far short of its bound.
func TestTheBoundCountsNoLessThanTheHeapTheStoreHolds(t *testing.T) {
	for _, size := range []int{1, 100, 4096} {
		for _, ttl := range []time.Duration{0, time.Hour} {
			for _, n := range []int{5_000, 14_500} {
				t.Run(fmt.Sprintf("%d values of %d bytes, ttl %v", n, size, ttl), func(t *testing.T) {
					s, held := fill(t, n, size, ttl)
					defer s.Close()
					counted := s.used
					t.Logf("counted %d bytes an entry, the heap holds %d", counted/int64(n), held/int64(n))
					if held > counted {
						t.Errorf("the store holds %d bytes of heap and counts %d against max_bytes (%.2f times)", held, counted, float64(held)/float64(counted))
					}
					if counted > 4*held {
						t.Errorf("the store counts %d bytes against max_bytes for %d of heap (%.2f times)", counted, held, float64(counted)/float64(held))
					}
				})
			}
		}
	}
}
