package memory_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/cache/memory"
	"github.com/abi-engine/engine/internal/expiry"
	"github.com/abi-engine/engine/ports"
)

// cost is what one entry of key and value counts against max_bytes.
func cost(key string, value []byte) int64 {
	return int64(len(key) + len(value) + memory.EntryOverhead)
}

func open(t *testing.T, maxBytes int64) *memory.Store {
	t.Helper()
	s, err := memory.Open(t.Context(), memory.Config{MaxBytes: maxBytes})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustSet(t *testing.T, s *memory.Store, key string, value []byte, ttl time.Duration) {
	t.Helper()
	if err := s.Set(t.Context(), key, value, ttl); err != nil {
		t.Fatalf("Set(%q): %v", key, err)
	}
}

func present(t *testing.T, s *memory.Store, key string) bool {
	t.Helper()
	ok, err := s.Exists(t.Context(), key)
	if err != nil {
		t.Fatalf("Exists(%q): %v", key, err)
	}
	return ok
}

// A cache holding as much as its max_bytes lets make room for a new entry
// by dropping the entry least recently used: a get makes an entry the most
// recently used, so the entry written second goes, not the first.
func TestAFullCacheEvictsTheLeastRecentlyUsedEntry(t *testing.T) {
	value := []byte("0123456789")
	s := open(t, 3*cost("k1", value))
	for _, k := range []string{"k1", "k2", "k3"} {
		mustSet(t, s, k, value, 0)
	}
	if _, err := s.Get(t.Context(), "k1"); err != nil {
		t.Fatalf("Get(k1): %v", err)
	}
	mustSet(t, s, "k4", value, 0)
	for k, want := range map[string]bool{"k1": true, "k2": false, "k3": true, "k4": true} {
		if got := present(t, s, k); got != want {
			t.Errorf("after a fourth entry in room for three, %s present = %v, want %v", k, got, want)
		}
	}
}

// However many entries a caller writes, with a TTL or without, the cache
// keeps no more than its max_bytes, and keeps the newest of them.
func TestACacheKeepsNoMoreThanItsMaxBytes(t *testing.T) {
	value := make([]byte, 1024)
	const room = 16
	s := open(t, room*cost("key/0000", value))
	for i := range 1000 {
		ttl := time.Duration(0)
		if i%2 == 1 {
			ttl = time.Hour
		}
		mustSet(t, s, fmt.Sprintf("key/%04d", i), value, ttl)
	}
	kept := 0
	for i := range 1000 {
		if present(t, s, fmt.Sprintf("key/%04d", i)) {
			kept++
		}
	}
	if kept != room {
		t.Fatalf("the cache kept %d of 1000 entries, room for %d", kept, room)
	}
	for i := 1000 - room; i < 1000; i++ {
		if k := fmt.Sprintf("key/%04d", i); !present(t, s, k) {
			t.Errorf("%s, among the newest %d, was evicted", k, room)
		}
	}
}

// An entry larger than the whole cache is refused as too large (413 to the
// caller), naming the bound, and evicts nothing on its way.
func TestASetLargerThanTheWholeCacheIsRefusedAndEvictsNothing(t *testing.T) {
	small := []byte("v")
	max := 4 * cost("a", small)
	s := open(t, max)
	mustSet(t, s, "a", small, 0)
	big := []byte(strings.Repeat("x", int(max)))
	err := s.Set(t.Context(), "big", big, 0)
	if !errors.Is(err, ports.ErrTooLarge) || !strings.Contains(err.Error(), "max_bytes") {
		t.Fatalf("Set of %d bytes in a cache of %d = %v, want ErrTooLarge naming max_bytes", len(big), max, err)
	}
	if ok, err := s.SetIfAbsent(t.Context(), "big", big, time.Minute); ok || !errors.Is(err, ports.ErrTooLarge) {
		t.Fatalf("SetIfAbsent of %d bytes in a cache of %d = %v, %v, want ErrTooLarge", len(big), max, ok, err)
	}
	if !present(t, s, "a") {
		t.Fatal("a refused set evicted an entry")
	}
	if present(t, s, "big") {
		t.Fatal("a refused set stored its entry")
	}
	// An entry of exactly the bound fits, alone.
	exact := []byte(strings.Repeat("x", int(max-cost("big", nil))))
	mustSet(t, s, "big", exact, 0)
	if present(t, s, "a") || !present(t, s, "big") {
		t.Fatal("an entry of exactly max_bytes did not take the whole cache")
	}
}

// A full cache drops expired entries before it evicts a live one, however
// recently the expired ones were used.
func TestAFullCacheDropsExpiredEntriesBeforeLiveOnes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		value := []byte("v")
		s := open(t, 2*cost("a", value))
		mustSet(t, s, "a", value, 0)
		mustSet(t, s, "b", value, time.Second)
		time.Sleep(2 * time.Second)
		mustSet(t, s, "c", value, 0)
		if !present(t, s, "a") || !present(t, s, "c") {
			t.Fatal("a live entry was evicted while an expired one took room")
		}
		// With no expired entry left, the least recently used goes.
		if _, err := s.Get(t.Context(), "c"); err != nil {
			t.Fatalf("Get(c): %v", err)
		}
		mustSet(t, s, "d", value, 0)
		if present(t, s, "a") || !present(t, s, "c") || !present(t, s, "d") {
			t.Fatal("a full cache of live entries did not evict the least recently used")
		}
	})
}

// The engine's sweep reclaims every expired entry, however few they are
// among the live ones, without a call touching them.
func TestASweepReclaimsEveryExpiredEntry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := open(t, 0)
		value := []byte("v")
		for i := range 10 * expiry.Batch {
			mustSet(t, s, fmt.Sprint("live/", i), value, 0)
		}
		for i := range 100 {
			mustSet(t, s, fmt.Sprint("gone/", i), value, time.Second)
		}
		for i := range 3 * expiry.Batch {
			mustSet(t, s, fmt.Sprint("later/", i), value, time.Hour)
		}
		time.Sleep(2 * time.Second)
		if n, err := s.DeleteExpired(t.Context()); err != nil || n != 100 {
			t.Fatalf("DeleteExpired = %d, %v; want all 100 expired entries", n, err)
		}
		if n, err := s.DeleteExpired(t.Context()); err != nil || n != 0 {
			t.Fatalf("a second DeleteExpired = %d, %v; want 0", n, err)
		}
		// Many expire at once: the sweep takes them batch by batch, all of
		// them.
		time.Sleep(time.Hour)
		if n, err := s.DeleteExpired(t.Context()); err != nil || n != 3*expiry.Batch {
			t.Fatalf("DeleteExpired = %d, %v; want all %d expired entries", n, err, 3*expiry.Batch)
		}
		if !present(t, s, "live/0") {
			t.Fatal("the sweep removed a live entry")
		}
	})
}

// A negative max_bytes is refused, naming the setting; 0 is the default.
func TestANegativeMaxBytesIsRefused(t *testing.T) {
	err := memory.Config{MaxBytes: -1}.Check("services.cache.config")
	if !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), "services.cache.config.max_bytes") {
		t.Fatalf("Check of max_bytes -1 = %v, want ErrInvalidArgument naming services.cache.config.max_bytes", err)
	}
	if _, err := memory.Open(t.Context(), memory.Config{MaxBytes: -1}); !errors.Is(err, ports.ErrInvalidArgument) {
		t.Fatalf("Open with max_bytes -1 = %v, want ErrInvalidArgument", err)
	}
	c := memory.Config{}
	c.Default("")
	if c.MaxBytes != memory.DefaultMaxBytes {
		t.Fatalf("the default max_bytes is %d, want %d", c.MaxBytes, memory.DefaultMaxBytes)
	}
}
