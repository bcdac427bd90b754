package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/abi-engine/engine/ports"
)

func kept(s *Store, key string) bool {
	s.cache.mu.RLock()
	defer s.cache.mu.RUnlock()
	_, ok := s.cache.items[key]
	return ok
}

// A read under a term is kept and served again; a write drops it; a read
// with no term keeps nothing.
func TestReadsUnderATermAreKept(t *testing.T) {
	s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "kv.sqlite")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := ports.WithFencingToken(t.Context(), 1)
	if err := s.Set(ctx, "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(t.Context(), "k"); err != nil || kept(s, "k") {
		t.Fatalf("a read without a term: err %v, kept %v; want nil, false", err, kept(s, "k"))
	}
	if _, err := s.Get(ctx, "k"); err != nil || !kept(s, "k") {
		t.Fatalf("a read under term 1: err %v, kept %v; want nil, true", err, kept(s, "k"))
	}
	// Served from the cache: the reader pool is gone.
	if err := s.db.Read.Close(); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Get(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("a kept read = %q, %v; want v", v, err)
	}
	if err := s.Set(ctx, "k", []byte("w"), 0); err != nil || kept(s, "k") {
		t.Fatalf("after a write: err %v, kept %v; want nil, false", err, kept(s, "k"))
	}
}

// The cache holds no more than its bound, and no value above its limit.
func TestTheCacheIsBounded(t *testing.T) {
	c := newReadCache(cacheBytes)
	c.begin(1)
	value := make([]byte, 8<<10)
	for i := range 2 * cacheBytes / len(value) {
		gen, ok := c.ticket(1, "k")
		if !ok {
			t.Fatal("no ticket under the cache's term")
		}
		c.fill(1, gen, fmt.Sprintf("k%d", i), value, 0)
		if c.bytes > cacheBytes {
			t.Fatalf("after %d fills the cache holds %d bytes, over %d", i+1, c.bytes, cacheBytes)
		}
	}
	if len(c.items) < cacheBytes/(len(value)+entryOverhead+16)-1 {
		t.Fatalf("the cache keeps %d entries of %d bytes, want it nearly full", len(c.items), len(value))
	}
	gen, _ := c.ticket(1, "big")
	c.fill(1, gen, "big", make([]byte, cacheValueMax+1), 0)
	if _, ok := c.items["big"]; ok {
		t.Fatal("a value over cacheValueMax was kept")
	}
}

// held is what the cache's entries hold, counted as fill counts them.
func held(c *readCache) int {
	n := 0
	for k, e := range c.items {
		n += entrySize(k, e.value)
	}
	return n
}

// The cache's count is what its entries hold, also when a key it keeps is
// filled again, larger, while it is full, and the room is made by evicting
// that same key.
func TestTheCacheCountsWhatItHolds(t *testing.T) {
	big := make([]byte, 100)
	bigSize := len("k0000") + len(big) + entryOverhead
	// Room for the small K and two others, not for a large K and two.
	c := newReadCache(2*bigSize + len("K") + len(big) + entryOverhead - 1)
	c.begin(1)
	fill := func(key string, value []byte) {
		gen, _ := c.ticket(1, key)
		c.fill(1, gen, key, value, 0)
	}
	next := 0
	for i := range 1000 {
		fill("K", []byte("s"))
		for c.bytes+bigSize <= c.limit {
			fill(fmt.Sprintf("k%04d", next), big)
			next++
		}
		fill("K", big)
		if got := held(c); c.bytes != got || c.bytes > c.limit {
			t.Fatalf("after %d rounds the cache counts %d bytes and holds %d, of %d", i+1, c.bytes, got, c.limit)
		}
	}
}

// A fence that cannot be raised, here because another connection holds the
// file's write lock past the call's deadline, fails no read: the read goes
// on uncached, and the failure is noted, so that the next reads do not
// each try the raise again at once.
func TestAFenceThatCannotBeRaisedFailsNoRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.sqlite")
	s, err := Open(t.Context(), Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Set(t.Context(), "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	other, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := other.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec("INSERT INTO kv (key, value) VALUES ('held', x'00')"); err != nil {
		t.Fatal(err) // the write lock is now held
	}
	ctx, cancel := context.WithTimeout(ports.WithFencingToken(t.Context(), 3), 200*time.Millisecond)
	defer cancel()
	if v, err := s.Get(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("Get while the fence cannot be raised = %q, %v; want v", v, err)
	}
	if kept(s, "k") || s.failedAt.Load() == 0 {
		t.Fatalf("after a failed raise: kept %v, failure noted %v; want false, true", kept(s, "k"), s.failedAt.Load() != 0)
	}
}
