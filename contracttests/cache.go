package contracttests

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/abi-engine/engine/ports"
)

const (
	// cacheRacers is how many SetIfAbsent calls race on two handles.
	cacheRacers = 16
	// cacheRaceRounds is how many times each race runs.
	cacheRaceRounds = 10
	// cacheShortTTL is the TTL of entries that must expire during a test.
	cacheShortTTL = time.Second
)

// RunCache holds a cache adapter or tier to the ports.Cache contract. Every
// method is core: a cache has no optional parts.
func RunCache(t *testing.T, h Harness[ports.Cache]) {
	cases := []struct {
		name string
		run  func(t *testing.T, open func(t *testing.T) ports.Cache)
	}{
		{"EmptyStore", cacheEmptyStore},
		{"SetThenGet", cacheSetThenGet},
		{"SetOverwrites", cacheSetOverwrites},
		{"SetIfAbsent", cacheSetIfAbsent},
		{"Delete", cacheDelete},
		{"Exists", cacheExists},
		{"EmptyAndBinaryValues", cacheEmptyAndBinaryValues},
		{"ValuesAreCopied", cacheValuesAreCopied},
		{"OddKeys", cacheOddKeys},
		{"InvalidKeys", cacheInvalidKeys},
		{"NegativeTTLIsInvalid", cacheNegativeTTLIsInvalid},
		{"TTLIsBounded", cacheTTLIsBounded},
		{"TTLExpiry", cacheTTLExpiry},
		{"TTLBelowASecondExpires", cacheTTLBelowASecondExpires},
		{"DeleteExpired", cacheDeleteExpired},
		{"SetWithoutTTLClearsTheTTL", cacheSetWithoutTTLClearsTheTTL},
		{"HandlesShareTheStore", cacheHandlesShareTheStore},
		{"SetIfAbsentRace", cacheSetIfAbsentRace},
		{"SetIfAbsentRaceOverAnExpiredEntry", cacheSetIfAbsentRaceOverAnExpiredEntry},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newStore(t, h))
		})
	}
}

func cacheSet(t *testing.T, c ports.Cache, key string, value []byte, ttl time.Duration) {
	t.Helper()
	if err := c.Set(ctx(t), key, value, ttl); err != nil {
		t.Fatalf("Set %.40q: %v", key, err)
	}
}

func cacheMustGet(t *testing.T, c ports.Cache, key string, want []byte) {
	t.Helper()
	got, err := c.Get(ctx(t), key)
	if err != nil {
		t.Fatalf("Get %.40q: %v", key, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Get %.40q = %q, want %q", key, got, want)
	}
}

func cacheMustBeMissing(t *testing.T, c ports.Cache, key string) {
	t.Helper()
	if v, err := c.Get(ctx(t), key); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Get %.40q = %q, %v; want ErrNotFound", key, v, err)
	}
}

func cacheMustExist(t *testing.T, c ports.Cache, key string, want bool) {
	t.Helper()
	got, err := c.Exists(ctx(t), key)
	if err != nil {
		t.Fatalf("Exists %.40q: %v", key, err)
	}
	if got != want {
		t.Fatalf("Exists %.40q = %v, want %v", key, got, want)
	}
}

func cacheSetIfAbsentIs(t *testing.T, c ports.Cache, key string, value []byte, ttl time.Duration, want bool) {
	t.Helper()
	got, err := c.SetIfAbsent(ctx(t), key, value, ttl)
	if err != nil {
		t.Fatalf("SetIfAbsent %.40q: %v", key, err)
	}
	if got != want {
		t.Fatalf("SetIfAbsent %.40q = %v, want %v", key, got, want)
	}
}

func cacheDeleteIs(t *testing.T, c ports.Cache, key string, want bool) {
	t.Helper()
	got, err := c.Delete(ctx(t), key)
	if err != nil {
		t.Fatalf("Delete %.40q: %v", key, err)
	}
	if got != want {
		t.Fatalf("Delete %.40q = %v, want %v", key, got, want)
	}
}

func cacheEmptyStore(t *testing.T, open func(t *testing.T) ports.Cache) {
	c := open(t)
	cacheMustBeMissing(t, c, "k")
	cacheMustExist(t, c, "k", false)
	cacheDeleteIs(t, c, "k", false)
}

func cacheSetThenGet(t *testing.T, open func(t *testing.T) ports.Cache) {
	c := open(t)
	cacheSet(t, c, "k", []byte("v"), 0)
	cacheSet(t, c, "other", []byte("w"), time.Hour)
	cacheMustGet(t, c, "k", []byte("v"))
	cacheMustGet(t, c, "other", []byte("w"))
}

func cacheSetOverwrites(t *testing.T, open func(t *testing.T) ports.Cache) {
	c := open(t)
	cacheSet(t, c, "k", []byte("first"), 0)
	cacheSet(t, c, "k", []byte("second"), time.Hour)
	cacheMustGet(t, c, "k", []byte("second"))
}

func cacheSetIfAbsent(t *testing.T, open func(t *testing.T) ports.Cache) {
	c := open(t)
	cacheSetIfAbsentIs(t, c, "k", []byte("first"), 0, true)
	cacheSetIfAbsentIs(t, c, "k", []byte("second"), 0, false)
	cacheMustGet(t, c, "k", []byte("first"))
	cacheDeleteIs(t, c, "k", true)
	cacheSetIfAbsentIs(t, c, "k", []byte("third"), time.Hour, true)
	cacheMustGet(t, c, "k", []byte("third"))
}

func cacheDelete(t *testing.T, open func(t *testing.T) ports.Cache) {
	c := open(t)
	cacheSet(t, c, "gone", []byte("v"), 0)
	cacheSet(t, c, "kept", []byte("w"), 0)
	cacheDeleteIs(t, c, "gone", true)
	cacheMustBeMissing(t, c, "gone")
	cacheDeleteIs(t, c, "gone", false)
	cacheMustGet(t, c, "kept", []byte("w"))
}

func cacheExists(t *testing.T, open func(t *testing.T) ports.Cache) {
	c := open(t)
	cacheMustExist(t, c, "k", false)
	cacheSet(t, c, "k", []byte("v"), time.Hour)
	cacheMustExist(t, c, "k", true)
	cacheDeleteIs(t, c, "k", true)
	cacheMustExist(t, c, "k", false)
}

func cacheEmptyAndBinaryValues(t *testing.T, open func(t *testing.T) ports.Cache) {
	c := open(t)
	binary := []byte{0, 1, 2, 0xff, 0, '\n', 0x80}
	cacheSet(t, c, "empty", []byte{}, 0)
	cacheSet(t, c, "binary", binary, 0)
	got, err := c.Get(ctx(t), "empty")
	if err != nil || len(got) != 0 {
		t.Fatalf("Get of an empty value = %q, %v; want no bytes and no error", got, err)
	}
	cacheMustExist(t, c, "empty", true)
	cacheMustGet(t, c, "binary", binary)
}

func cacheValuesAreCopied(t *testing.T, open func(t *testing.T) ports.Cache) {
	c := open(t)
	v := []byte("original")
	cacheSet(t, c, "k", v, 0)
	copy(v, "CHANGED!")
	got, err := c.Get(ctx(t), "k")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if string(got) != "original" {
		t.Fatalf("changing the slice given to Set changed the entry to %q", got)
	}
	copy(got, "CHANGED!")
	cacheMustGet(t, c, "k", []byte("original"))
}

// cacheOddKeyList are keys a cache must treat as plain, distinct names.
func cacheOddKeyList() []string {
	return []string{"a/b", "a", "../x", "x", "./x", "with spaces", " lead", "unicode ключ 値 ✓", "a//b", "/x", "x/", strings.Repeat("k", 1024)}
}

func cacheOddKeys(t *testing.T, open func(t *testing.T) ports.Cache) {
	c := open(t)
	for i, key := range cacheOddKeyList() {
		cacheSet(t, c, key, fmt.Appendf(nil, "value %d", i), 0)
	}
	for i, key := range cacheOddKeyList() {
		cacheMustGet(t, c, key, fmt.Appendf(nil, "value %d", i))
		cacheMustExist(t, c, key, true)
	}
	for _, key := range cacheOddKeyList() {
		cacheDeleteIs(t, c, key, true)
		cacheMustBeMissing(t, c, key)
	}
}

func cacheInvalidKeys(t *testing.T, open func(t *testing.T) ports.Cache) {
	c := open(t)
	for _, key := range []string{"", strings.Repeat("k", 1025), "bad\xffutf8"} {
		calls := map[string]error{}
		_, calls["Get"] = c.Get(ctx(t), key)
		calls["Set"] = c.Set(ctx(t), key, []byte("v"), 0)
		_, calls["SetIfAbsent"] = c.SetIfAbsent(ctx(t), key, []byte("v"), 0)
		_, calls["Delete"] = c.Delete(ctx(t), key)
		_, calls["Exists"] = c.Exists(ctx(t), key)
		for name, err := range calls {
			if !errors.Is(err, ports.ErrInvalidArgument) {
				t.Errorf("%s with key %.20q (%d bytes): err %v, want ErrInvalidArgument", name, key, len(key), err)
			}
		}
	}
}

func cacheNegativeTTLIsInvalid(t *testing.T, open func(t *testing.T) ports.Cache) {
	c := open(t)
	if err := c.Set(ctx(t), "k", []byte("v"), -time.Second); !errors.Is(err, ports.ErrInvalidArgument) {
		t.Fatalf("Set with a negative TTL: err %v, want ErrInvalidArgument", err)
	}
	if _, err := c.SetIfAbsent(ctx(t), "k", []byte("v"), -time.Second); !errors.Is(err, ports.ErrInvalidArgument) {
		t.Fatalf("SetIfAbsent with a negative TTL: err %v, want ErrInvalidArgument", err)
	}
	cacheMustBeMissing(t, c, "k")
}

// cacheAwaitExpiry polls key until Get says it is gone, within the call
// timeout: it asserts that the entry expires, not how fast. writer is the
// method that stored key with cacheShortTTL, named when it stays.
func cacheAwaitExpiry(t *testing.T, c ports.Cache, key, writer string) {
	t.Helper()
	deadline := time.Now().Add(callTimeout)
	for {
		_, err := c.Get(ctx(t), key)
		if errors.Is(err, ports.ErrNotFound) {
			return
		}
		if err != nil {
			t.Fatalf("Get %q: %v", key, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %q with a TTL of %v: Get still returns it after %v; %s kept the TTL too long or dropped it, or Get ignores expiry",
				writer, key, cacheShortTTL, callTimeout, writer)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Each expiring entry is touched by one method only after expiry, so a
// cache that purges on read cannot hide a method that ignores the TTL.
func cacheTTLExpiry(t *testing.T, open func(t *testing.T) ports.Cache) {
	c, other := open(t), open(t)
	cacheSet(t, c, "keep/none", []byte("v"), 0)
	cacheSet(t, c, "keep/long", []byte("v"), time.Hour)
	cacheSetIfAbsentIs(t, c, "keep/absent", []byte("v"), time.Hour, true)
	for _, k := range []string{"ttl/exists", "ttl/setifabsent", "ttl/delete"} {
		cacheSet(t, c, k, []byte("old"), cacheShortTTL)
	}
	cacheSetIfAbsentIs(t, c, "ttl/get", []byte("old"), cacheShortTTL, true)
	cacheAwaitExpiry(t, other, "ttl/get", "SetIfAbsent")

	if ok, err := other.Exists(ctx(t), "ttl/exists"); err != nil || ok {
		if err != nil {
			t.Fatalf("Exists %q: %v", "ttl/exists", err)
		}
		expiredShown(t, other.Get, cacheShortTTL, "ttl/exists", "Set", "Exists")
		t.FailNow()
	}
	ok, err := other.SetIfAbsent(ctx(t), "ttl/setifabsent", []byte("new"), 0)
	if err != nil {
		t.Fatalf("SetIfAbsent over an expired entry: %v", err)
	}
	if !ok {
		expiredShown(t, other.Get, cacheShortTTL, "ttl/setifabsent", "Set", "SetIfAbsent")
		t.FailNow()
	}
	cacheMustGet(t, c, "ttl/setifabsent", []byte("new"))
	// Delete removes what it finds, so a wrong answer cannot be traced back
	// with Get: the cases above have already judged Set's TTL by then.
	if ok, err := other.Delete(ctx(t), "ttl/delete"); err != nil || ok {
		t.Fatalf("Delete of an expired entry = %v, %v; want false: Delete ignores expiry", ok, err)
	}
	for _, k := range []string{"keep/none", "keep/long", "keep/absent"} {
		cacheMustGet(t, other, k, []byte("v"))
	}
}

// A cache that keeps expired entries until swept says so by implementing
// ports.Expirer, and the engine sweeps it; sweeping removes what expired
// and nothing else.
func cacheDeleteExpired(t *testing.T, open func(t *testing.T) ports.Cache) {
	c := open(t)
	sweeper, ok := c.(ports.Expirer)
	if !ok {
		t.Skipf("%s: no ports.Expirer (expired entries are forgotten without a sweep)", adapterName(t))
	}
	cacheSet(t, c, "keep/none", []byte("v"), 0)
	cacheSet(t, c, "keep/long", []byte("v"), time.Hour)
	cacheSet(t, c, "gone/a", []byte("v"), cacheShortTTL)
	cacheSet(t, c, "gone/b", []byte("v"), cacheShortTTL)
	// The probe, written last, expires last: once it has, so have the two.
	// Reading it may drop it, as a cache that purges on read does.
	cacheSet(t, c, "probe", []byte("v"), cacheShortTTL)
	cacheAwaitExpiry(t, c, "probe", "Set")
	if n, err := sweeper.DeleteExpired(ctx(t)); err != nil || n < 2 || n > 3 {
		t.Fatalf("DeleteExpired = %d, %v; want the 2 expired entries and perhaps the probe", n, err)
	}
	if n, err := sweeper.DeleteExpired(ctx(t)); err != nil || n != 0 {
		t.Fatalf("a second DeleteExpired = %d, %v; want 0", n, err)
	}
	for _, k := range []string{"keep/none", "keep/long"} {
		cacheMustGet(t, c, k, []byte("v"))
	}
}

func cacheSetWithoutTTLClearsTheTTL(t *testing.T, open func(t *testing.T) ports.Cache) {
	c := open(t)
	cacheSet(t, c, "k", []byte("short"), cacheShortTTL)
	cacheSet(t, c, "k", []byte("forever"), 0)
	cacheSet(t, c, "marker", []byte("m"), cacheShortTTL)
	cacheAwaitExpiry(t, c, "marker", "Set")
	cacheMustGet(t, c, "k", []byte("forever"))
}

func cacheHandlesShareTheStore(t *testing.T, open func(t *testing.T) ports.Cache) {
	a, b := open(t), open(t)
	cacheSet(t, a, "k", []byte("from a"), 0)
	cacheMustGet(t, b, "k", []byte("from a"))
	cacheSetIfAbsentIs(t, b, "k", []byte("from b"), 0, false)
	cacheDeleteIs(t, b, "k", true)
	cacheMustExist(t, a, "k", false)
}

// cacheRace runs cacheRacers SetIfAbsent calls on key, alternating between
// two handles and all released at once, and checks that exactly one won
// and that its value is the one stored.
func cacheRace(t *testing.T, a, b ports.Cache, round int, key string) {
	t.Helper()
	var wg sync.WaitGroup
	won := make([]bool, cacheRacers)
	start := make(chan struct{})
	for i := range cacheRacers {
		c := a
		if i%2 == 1 {
			c = b
		}
		wg.Go(func() {
			<-start
			ok, err := c.SetIfAbsent(ctx(t), key, fmt.Appendf(nil, "racer %d", i), 0)
			if err != nil {
				t.Errorf("round %d: racer %d: SetIfAbsent: %v", round, i, err)
			}
			won[i] = ok
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, ok := range won {
		if ok && winner >= 0 {
			t.Fatalf("round %d: racers %d and %d both won SetIfAbsent on %q", round, winner, i, key)
		}
		if ok {
			winner = i
		}
	}
	if winner < 0 {
		t.Fatalf("round %d: no racer won SetIfAbsent on %q", round, key)
	}
	cacheMustGet(t, a, key, fmt.Appendf(nil, "racer %d", winner))
}

func cacheSetIfAbsentRace(t *testing.T, open func(t *testing.T) ports.Cache) {
	a, b := open(t), open(t)
	for round := range cacheRaceRounds {
		cacheRace(t, a, b, round, fmt.Sprintf("race-%d", round))
	}
}

// Replacing an expired entry is a compare-and-swap in tiers that keep the
// expiry beside the value: still exactly one racer may win.
func cacheSetIfAbsentRaceOverAnExpiredEntry(t *testing.T, open func(t *testing.T) ports.Cache) {
	a, b := open(t), open(t)
	keys := make([]string, cacheRaceRounds)
	for round := range keys {
		keys[round] = fmt.Sprintf("expired-%d", round)
		cacheSet(t, a, keys[round], []byte("stale"), cacheShortTTL)
	}
	for _, key := range keys {
		cacheAwaitExpiry(t, a, key, "Set")
	}
	for round, key := range keys {
		cacheRace(t, a, b, round, key)
	}
}
