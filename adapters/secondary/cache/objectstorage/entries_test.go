package objectstorage_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/cache/objectstorage"
	"github.com/abi-engine/engine/ports"
)

// Exists, Delete and SetIfAbsent decide on an entry's expiry, its first 8
// bytes, and read those only: not the value after them, however large.
func TestExistsDeleteAndSetIfAbsentReadNoValue(t *testing.T) {
	everyStore(t, func(t *testing.T, objects ports.ObjectStorage) {
		reads := &readCounter{ObjectStorage: objects}
		tier := openTier(t, objectstorage.Config{}, reads)
		big := bytes.Repeat([]byte("v"), 1<<20)
		if err := tier.Set(t.Context(), "live", big, time.Hour); err != nil {
			t.Fatalf("Set: %v", err)
		}
		if err := tier.Set(t.Context(), "stale", big, ports.MinTTL); err != nil {
			t.Fatalf("Set: %v", err)
		}
		awaitGone(t, tier, "stale")
		for _, c := range []struct {
			call string
			do   func() (bool, error)
			want bool
		}{
			{"Exists of a live entry", func() (bool, error) { return tier.Exists(t.Context(), "live") }, true},
			{"SetIfAbsent over a live entry", func() (bool, error) { return tier.SetIfAbsent(t.Context(), "live", []byte("x"), 0) }, false},
			{"Exists of an expired entry", func() (bool, error) { return tier.Exists(t.Context(), "stale") }, false},
			{"Delete of an expired entry", func() (bool, error) { return tier.Delete(t.Context(), "stale") }, false},
			{"SetIfAbsent over an expired entry", func() (bool, error) { return tier.SetIfAbsent(t.Context(), "stale", []byte("x"), 0) }, true},
			{"Delete of a live entry", func() (bool, error) { return tier.Delete(t.Context(), "live") }, true},
		} {
			reads.read.Store(0)
			got, err := c.do()
			if err != nil || got != c.want {
				t.Fatalf("%s = %v, %v; want %v", c.call, got, err, c.want)
			}
			if n := reads.read.Load(); n > 8 {
				t.Errorf("%s read %d bytes of an object of %d; want the entry's expiry only, 8 bytes", c.call, n, len(big)+8)
			}
		}
	})
}

// awaitGone waits until key's entry has expired, as the tier judges it.
func awaitGone(t *testing.T, tier *objectstorage.Store, key string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := tier.Exists(t.Context(), key)
		if err != nil {
			t.Fatalf("Exists %q: %v", key, err)
		}
		if !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q still exists 30 s after its TTL of %v", key, ports.MinTTL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
