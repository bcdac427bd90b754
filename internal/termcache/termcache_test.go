package termcache

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/abi-engine/engine/ports"
)

// The cache holds no more than its bound, and no value above its limit.
func TestTheCacheIsBounded(t *testing.T) {
	c := New(Bytes)
	c.begin(1)
	value := make([]byte, 8<<10)
	for i := range 2 * Bytes / len(value) {
		gen, ok := c.Ticket(1, "k")
		if !ok {
			t.Fatal("no ticket under the cache's term")
		}
		c.Fill(1, gen, fmt.Sprintf("k%d", i), value, 0)
		if c.bytes > Bytes {
			t.Fatalf("after %d fills the cache holds %d bytes, over %d", i+1, c.bytes, Bytes)
		}
	}
	if len(c.items) < Bytes/(len(value)+entryOverhead+16)-1 {
		t.Fatalf("the cache keeps %d entries of %d bytes, want it nearly full", len(c.items), len(value))
	}
	gen, _ := c.Ticket(1, "big")
	c.Fill(1, gen, "big", make([]byte, ValueMax+1), 0)
	if _, ok := c.items["big"]; ok {
		t.Fatal("a value over ValueMax was kept")
	}
}

// held is what the cache's entries hold, counted as fill counts them.
func held(c *Cache) int {
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
	c := New(2*bigSize + len("K") + len(big) + entryOverhead - 1)
	c.begin(1)
	fill := func(key string, value []byte) {
		gen, _ := c.Ticket(1, key)
		c.Fill(1, gen, key, value, 0)
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

// A term begins only once the fence has been raised to it; a refusal by a
// newer term leaves reads uncached and is not a failure; any other failure
// leaves the fence alone for RaiseRetry; an ended term never begins again.
func TestTrustBeginsATermOnlyOnceTheFenceStandsThere(t *testing.T) {
	ctx := t.Context()
	c := New(Bytes)
	var raised []uint64
	ok := func(_ context.Context, token uint64) error { raised = append(raised, token); return nil }
	refused := func(context.Context, uint64) error { return fmt.Errorf("%w: newer term", ports.ErrFenced) }
	broken := func(context.Context, uint64) error { return errors.New("connection lost") }

	if c.Trust(ctx, 4, refused) || c.Current(4) || c.RaiseFailed() {
		t.Fatal("a term the fence has passed was trusted, or its refusal counted as a failure")
	}
	if !c.Trust(ctx, 5, ok) || !c.Current(5) || len(raised) != 1 {
		t.Fatalf("term 5 after a raise: trusted %v, raises %v", c.Current(5), raised)
	}
	if !c.Trust(ctx, 5, broken) || len(raised) != 1 {
		t.Fatal("the live term was raised again, or not trusted")
	}
	if c.Trust(ctx, 6, broken) || !c.Current(5) || !c.RaiseFailed() {
		t.Fatal("a failed raise began term 6, ended term 5, or was not noted")
	}
	if c.Trust(ctx, 6, ok) || len(raised) != 1 {
		t.Fatal("a raise was tried again within RaiseRetry of a failure")
	}
	c.failedAt.Store(0)
	c.End(6)
	if c.Trust(ctx, 6, ok) || c.Current(5) || len(raised) != 1 {
		t.Fatal("an ended term was raised or trusted, or a term below it stayed live")
	}
	if !c.Trust(ctx, 7, ok) || len(raised) != 2 {
		t.Fatal("a term after the ended one did not begin")
	}
	if c.Trust(ctx, 1<<63, ok) {
		t.Fatal("a token beyond the backends' integers was trusted")
	}
}
