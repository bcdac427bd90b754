// Package maxbytestest holds what the memory stores' tests of max_bytes
// share: what a store counts against its bound is meant to be no less than
// the heap it holds, so that the bound is one on the engine's memory and
// not only on the bytes its callers sent.
package maxbytestest

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// Live is the bytes of the heap still reachable, once collected.
func Live() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// Check fails t when held, the heap a store holds, is more than counted,
// what it counts against max_bytes, or when counted is more than four
// times held, so loose a bound that a store fills far short of it.
func Check(t testing.TB, held, counted int64) {
	t.Helper()
	if held > counted {
		t.Errorf("the store holds %d bytes of heap and counts %d against max_bytes (%.2f times)", held, counted, float64(held)/float64(counted))
	}
	if counted > 4*held {
		t.Errorf("the store counts %d bytes against max_bytes for %d of heap (%.2f times)", counted, held, float64(counted)/float64(held))
	}
}

// A Store is a store of keys and values for Entries: Set as the ports
// have it, Used what it counts against max_bytes.
type Store interface {
	Set(ctx context.Context, key string, value []byte, ttl time.Duration) error
	Used() int64
	Close() error
}

// Entries checks, with Check, the stores open makes, each holding 5,000 or
// 14,500 keys of their own with values of 1, 100 and 4,096 bytes, with and
// without a TTL: small entries above all, whose upkeep is most of them.
func Entries(t *testing.T, open func(t *testing.T) Store) {
	for _, size := range []int{1, 100, 4096} {
		for _, ttl := range []time.Duration{0, time.Hour} {
			for _, n := range []int{5_000, 14_500} {
				t.Run(fmt.Sprintf("%d values of %d bytes, ttl %v", n, size, ttl), func(t *testing.T) {
					before := Live()
					s := open(t)
					defer s.Close()
					value := make([]byte, size)
					for i := range n {
						if err := s.Set(t.Context(), fmt.Sprintf("key-%08d", i), value, ttl); err != nil {
							t.Fatal(err)
						}
					}
					held := Live() - before
					t.Logf("counted %d bytes an entry, the heap holds %d", s.Used()/int64(n), held/int64(n))
					Check(t, held, s.Used())
				})
			}
		}
	}
}
