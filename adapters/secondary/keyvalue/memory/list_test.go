package memory_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
	"github.com/abi-engine/engine/ports"
)

// manyKeys is a store of n keys, k/0000000 on, under a prefix of their own
// among keys before and after it.
func manyKeys(tb testing.TB, n int) *memory.Store {
	tb.Helper()
	s, err := memory.Open(tb.Context(), memory.Config{MaxBytes: 1 << 30})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	for _, k := range []string{"a", "j/", "l"} {
		if err := s.Set(tb.Context(), k, []byte("v"), 0); err != nil {
			tb.Fatal(err)
		}
	}
	for i := range n {
		if err := s.Set(tb.Context(), fmt.Sprintf("k/%07d", i), []byte("v"), 0); err != nil {
			tb.Fatal(err)
		}
	}
	return s
}

// A page of keys costs the page, not a walk of the whole store: a caller
// paging through a hundred thousand keys, a hundred at a time, while
// another sets and gets keys beside it, gets every key once, in order, in
// a thousand pages that take well under a minute together. Before, every
// page walked all the keys under the store's lock and sorted every match,
// about half a second a page at this size, holding up every other call
// on the store meanwhile: the whole listing took minutes.
func TestAPageOfKeysCostsThePageNotTheStore(t *testing.T) {
	const n = 100_000
	s := manyKeys(t, n)
	stop := make(chan struct{})
	var beside sync.WaitGroup
	var calls atomic.Int64
	beside.Go(func() {
		// Cleanup cancels the test's context before it stops this caller.
		ctx := context.WithoutCancel(t.Context())
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := fmt.Sprintf("k/%07d", i%n)
			if _, err := s.Get(ctx, k); err != nil {
				t.Errorf("Get %q beside the listing: %v", k, err)
				return
			}
			if err := s.Set(ctx, "m/"+k, []byte("v"), 0); err != nil {
				t.Errorf("Set beside the listing: %v", err)
				return
			}
			calls.Add(1)
		}
	})
	t.Cleanup(func() { close(stop); beside.Wait() })
	deadline := time.Now().Add(time.Minute)
	cursor, listed, pages := "", 0, 0
	for {
		if time.Now().After(deadline) {
			t.Fatalf("after a minute, %d pages of 100 listed %d of %d keys", pages, listed, n)
		}
		keys, next, err := s.ListKeys(t.Context(), "k/", ports.DefaultPage, cursor)
		if err != nil {
			t.Fatalf("ListKeys after %q: %v", cursor, err)
		}
		for _, k := range keys {
			if want := fmt.Sprintf("k/%07d", listed); k != want {
				t.Fatalf("ListKeys gave %q where %q comes next", k, want)
			}
			listed++
		}
		pages++
		if next == "" {
			break
		}
		cursor = next
	}
	if listed != n || pages != n/ports.DefaultPage {
		t.Fatalf("the listing gave %d keys in %d pages, want %d in %d", listed, pages, n, n/ports.DefaultPage)
	}
	t.Logf("%d pages listed while %d gets and sets went on beside them", pages, calls.Load())
}

// BenchmarkGetBesideAListing measures a get on a store of a million keys
// while another caller pages through them without pause, a hundred keys a
// page: ns/op, p99-ns, the time 99 gets in 100 stay within, and max-ns, the
// longest a get took.
func BenchmarkGetBesideAListing(b *testing.B) {
	const n = 1_000_000
	s := manyKeys(b, n)
	stop := make(chan struct{})
	var lister sync.WaitGroup
	lister.Go(func() {
		cursor := ""
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, next, err := s.ListKeys(b.Context(), "k/", 0, cursor)
			if err != nil {
				b.Error(err)
				return
			}
			cursor = next
		}
	})
	var took []time.Duration
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		if _, err := s.Get(b.Context(), fmt.Sprintf("k/%07d", i%n)); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	close(stop)
	lister.Wait()
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(took[len(took)-1].Nanoseconds()), "max-ns")
}

// A listing that pages through keys while others set, expire and delete
// keys among them lists each key present throughout exactly once, every
// page in order, and never a key twice: the ordered keys stay true to the
// map through every write, expiry and removal a listing meets.
func TestAListingAmongWritersListsEveryKeyPresentThroughoutOnce(t *testing.T) {
	s := manyKeys(t, 0)
	ctx := t.Context()
	const stable = 2_000
	for i := range stable {
		if err := s.Set(ctx, fmt.Sprintf("s/%04d", i), []byte("v"), 0); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var writers sync.WaitGroup
	for w := range 2 {
		writers.Go(func() {
			wctx := context.WithoutCancel(ctx)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("s/%04d-%d", (i*7+w*13)%stable, w)
				var err error
				switch i % 3 {
				case 0:
					err = s.Set(wctx, k, []byte("v"), 0)
				case 1:
					err = s.Set(wctx, k+"-t", []byte("v"), time.Millisecond)
				default:
					_, err = s.Delete(wctx, k)
				}
				if err != nil {
					t.Errorf("write %q beside the listing: %v", k, err)
					return
				}
			}
		})
	}
	t.Cleanup(func() { close(stop); writers.Wait() })
	for round := range 10 {
		seen := map[string]int{}
		cursor, last := "", ""
		for {
			keys, next, err := s.ListKeys(ctx, "s/", 7, cursor)
			if err != nil {
				t.Fatalf("round %d: ListKeys after %q: %v", round, cursor, err)
			}
			for _, k := range keys {
				if k <= last {
					t.Fatalf("round %d: ListKeys gave %q after %q", round, k, last)
				}
				last = k
				seen[k]++
			}
			if next == "" {
				break
			}
			cursor = next
		}
		for i := range stable {
			if k := fmt.Sprintf("s/%04d", i); seen[k] != 1 {
				t.Fatalf("round %d: %q, present throughout, listed %d times", round, k, seen[k])
			}
		}
	}
}
