package memory

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// checkIndex fails unless x holds exactly want, in order, in runs of 1 to
// runMax keys, no two neighbours both under a quarter full: so the runs are
// never many more than the keys call for, whatever was removed.
func checkIndex(t *testing.T, x *keyIndex, want map[string]bool) {
	t.Helper()
	var got []string
	for i, r := range x.runs {
		if len(r) == 0 || len(r) > runMax {
			t.Fatalf("run %d of %d holds %d keys, want 1 to %d", i, len(x.runs), len(r), runMax)
		}
		if i > 0 && len(r) < runMax/4 && len(x.runs[i-1]) < runMax/4 {
			t.Fatalf("runs %d and %d hold %d and %d keys, both under a quarter of %d", i-1, i, len(x.runs[i-1]), len(r), runMax)
		}
		got = append(got, r...)
	}
	if w := slices.Sorted(maps.Keys(want)); !slices.Equal(got, w) {
		t.Fatalf("the index holds %d keys, want %d, in order", len(got), len(w))
	}
	var ascended []string
	x.ascend("", true, func(k string) bool { ascended = append(ascended, k); return true })
	if !slices.Equal(ascended, got) {
		t.Fatalf("ascend from the start gave %d keys, the runs hold %d", len(ascended), len(got))
	}
}

// The index holds every key inserted and not removed, in byte order,
// through any mix of inserts and removes, and ascends from any place in
// that order, a key it does not hold included.
func TestTheKeyIndexKeepsTheKeysInOrderThroughInsertsAndRemoves(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var x keyIndex
	want := map[string]bool{}
	key := func() string { return fmt.Sprintf("k%05d", rng.IntN(20_000)) }
	for round := range 24 {
		grow := round%4 != 3 // three rounds of growth, then one that empties much of it
		for range 5_000 {
			k := key()
			if grow == (rng.IntN(4) != 0) {
				if !want[k] {
					x.insert(k)
					want[k] = true
				}
			} else {
				x.remove(k)
				delete(want, k)
			}
		}
		checkIndex(t, &x, want)
	}
	sorted := slices.Sorted(maps.Keys(want))
	for range 200 {
		from := key()
		i, _ := slices.BinarySearch(sorted, from)
		var got []string
		x.ascend(from, false, func(k string) bool { got = append(got, k); return len(got) < 10 })
		rest := sorted[i:]
		if len(rest) > 0 && rest[0] == from {
			rest = rest[1:]
		}
		if w := rest[:min(10, len(rest))]; !slices.Equal(got, w) {
			t.Fatalf("ascend after %q = %q, want %q", from, got, w)
		}
	}
	for k := range want {
		x.remove(k)
	}
	if len(x.runs) != 0 {
		t.Fatalf("the index of no keys has %d runs", len(x.runs))
	}
}

// A listing that meets a long run of expired keys lists the live keys
// around it, page by page as a caller pages through, and removes the
// expired keys it met, from the map and from the index, and their room.
func TestAListingSkipsAndRemovesTheExpiredKeysItMeets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New()
		for i := range 3 * listExpired {
			if err := s.Set(t.Context(), fmt.Sprintf("b/%04d", i), []byte("v"), time.Second); err != nil {
				t.Fatal(err)
			}
		}
		live := []string{"a/1", "a/2", "c/1", "c/2"}
		for _, k := range live {
			if err := s.Set(t.Context(), k, []byte("v"), 0); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(2 * time.Second)
		keys, next, err := s.ListKeys(t.Context(), "", 2, "")
		if err != nil || !slices.Equal(keys, live[:2]) || next == "" {
			t.Fatalf("first page = %q, %q, %v; want %q and a cursor", keys, next, err, live[:2])
		}
		keys, next, err = s.ListKeys(t.Context(), "", 2, next)
		if err != nil || !slices.Equal(keys, live[2:]) || next != "" {
			t.Fatalf("second page = %q, %q, %v; want %q and no cursor", keys, next, err, live[2:])
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		want := map[string]bool{}
		for _, k := range live {
			want[k] = true
		}
		checkIndex(t, &s.keys, want)
		if len(s.entries) != len(live) || s.used != int64(len(live))*(3+1+EntryOverhead) {
			t.Fatalf("after the listing the store holds %d entries in %d bytes, want the %d live ones", len(s.entries), s.used, len(live))
		}
	})
}
