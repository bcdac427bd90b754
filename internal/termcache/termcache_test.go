package termcache

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

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
		c.Fill(1, gen, fmt.Sprintf("k%d", i), value, time.Time{})
		if c.bytes > Bytes {
			t.Fatalf("after %d fills the cache holds %d bytes, over %d", i+1, c.bytes, Bytes)
		}
	}
	if len(c.items) < Bytes/(len(value)+entryOverhead+16)-1 {
		t.Fatalf("the cache keeps %d entries of %d bytes, want it nearly full", len(c.items), len(value))
	}
	gen, _ := c.Ticket(1, "big")
	c.Fill(1, gen, "big", make([]byte, ValueMax+1), time.Time{})
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
		c.Fill(1, gen, key, value, time.Time{})
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

// keep reads key under term and keeps value, as a store does.
func keep(c *Cache, term uint64, key, value string) bool {
	gen, ok := c.Ticket(term, key)
	if ok {
		c.Fill(term, gen, key, []byte(value), time.Time{})
	}
	_, kept := c.Get(term, key, time.Now())
	return kept
}

// A write whose outcome is unknown when it returns may land later, after
// a read has kept the value before it: its key is kept no more until a
// term newer than the write's begins, by which time the fence has settled
// it. A write of known outcome leaves the key to be kept again.
func TestAWriteOfUnknownOutcomeKeepsItsKeyOut(t *testing.T) {
	c := New(Bytes)
	c.begin(5)
	c.WriteStarts(5, "k")(true)
	if !keep(c, 5, "k", "v") {
		t.Fatal("a key whose write is known was not kept")
	}
	c.WriteStarts(5, "k")(false)
	if keep(c, 5, "k", "v") {
		t.Fatal("a key whose write may still land was kept under the write's term")
	}
	// An older term's write cannot land: the fence stands at 5.
	c.WriteStarts(4, "old")(false)
	if !keep(c, 5, "old", "v") {
		t.Fatal("a key written of unknown outcome under an older term was kept out")
	}
	// Written before the cache began its term, under that term: still
	// unknown when it begins, since the fence's raise to a term it
	// already stands at waits for nothing.
	c.WriteStarts(6, "early")(false)
	c.begin(6)
	if keep(c, 6, "early", "v") {
		t.Fatal("a write of unknown outcome under term 6, made before term 6 began here, was forgotten")
	}
	if !keep(c, 6, "other", "v") {
		t.Fatal("term 6 keeps nothing")
	}
	c.begin(7)
	if !keep(c, 7, "k", "v") || !keep(c, 7, "early", "v") {
		t.Fatal("a newer term still keeps out keys whose older writes the fence has settled")
	}
	// A write without a term is fenced by none: it may land in this term
	// or any later one.
	c.WriteStarts(0, "unfenced")(false)
	if keep(c, 7, "unfenced", "v") {
		t.Fatal("a key whose unfenced write may still land was kept in the live term")
	}
	c.begin(8)
	if keep(c, 8, "unfenced", "v") {
		t.Fatal("a key whose unfenced write may still land was kept in a later term")
	}
}

// Past unknownMax keys of unknown outcome, the term keeps nothing more.
func TestUnknownOutcomesAreBounded(t *testing.T) {
	c := New(Bytes)
	c.begin(1)
	for i := range unknownMax {
		c.WriteStarts(1, fmt.Sprintf("k%d", i))(false)
	}
	if !c.Current(1) {
		t.Fatal("the term ended before unknownMax keys")
	}
	c.WriteStarts(1, "one more")(false)
	if c.Current(1) {
		t.Fatalf("%d keys of unknown outcome, and the term goes on keeping", unknownMax+1)
	}
	if len(c.unknown) > unknownMax {
		t.Fatalf("%d keys held, over %d", len(c.unknown), unknownMax)
	}
}

// A kept value expires by whichever of its two clocks says so first: the
// wall clock, which counts a suspend of the host that the monotonic clock
// does not, and the monotonic one, which a step of the wall clock back
// does not move.
func TestAKeptValueExpiresByEitherClock(t *testing.T) {
	const minute = int64(time.Minute)
	e := cached{wall: 1000 * minute, mono: 10 * minute} // a minute from wall 999, mono 9
	for _, c := range []struct {
		what       string
		wall, mono int64
		want       bool
	}{
		{"live", 999 * minute, 9 * minute, false},
		{"at its expiry", 1000 * minute, 10 * minute, true},
		{"after a suspend of an hour", 1059 * minute, 9 * minute, true},
		{"after a step of the wall clock an hour back", 939 * minute, 11 * minute, true},
	} {
		if got := e.expiredAt(c.wall, c.mono); got != c.want {
			t.Errorf("%s: expired %v, want %v", c.what, got, c.want)
		}
	}
	if (cached{}).expiredAt(math.MaxInt64, math.MaxInt64) {
		t.Error("a value that never expires expired")
	}
	// Through Fill and Get, with a time from time.Now and one with no
	// monotonic reading, as a store reads one from a file.
	c := New(Bytes)
	c.begin(1)
	now := time.Now()
	for _, expires := range []time.Time{now.Add(time.Hour), time.Unix(0, now.Add(time.Hour).UnixNano())} {
		gen, _ := c.Ticket(1, "k")
		c.Fill(1, gen, "k", []byte("v"), expires)
		if _, ok := c.Get(1, "k", now); !ok {
			t.Fatalf("a value expiring at %v is not live at %v", expires, now)
		}
		if _, ok := c.Get(1, "k", now.Add(time.Hour)); ok {
			t.Fatalf("a value expiring at %v is live an hour later", expires)
		}
	}
}
