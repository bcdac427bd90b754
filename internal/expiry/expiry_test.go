package expiry

import (
	"container/heap"
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

type item struct {
	expires time.Time
	at      int
}

func (i *item) ExpiresAt() time.Time { return i.expires }
func (i *item) Place(at int)         { i.at = at }

// The heap gives entries back soonest first, each knowing its place while
// it is in the heap, so that one removed by its place is the one meant.
func TestTheHeapGivesTheSoonestFirstAndKeepsEachPlace(t *testing.T) {
	base := time.Unix(1_700_000_000, 0)
	var h Heap[*item]
	items := make([]*item, 500)
	for n := range items {
		items[n] = &item{expires: base.Add(time.Duration(rand.IntN(1000)) * time.Second)}
		heap.Push(&h, items[n])
	}
	for n, it := range h {
		if it.at != n {
			t.Fatalf("entry at index %d says it is at %d", n, it.at)
		}
	}
	for _, it := range items[:100] {
		if removed := heap.Remove(&h, it.at).(*item); removed != it || it.at != -1 {
			t.Fatalf("removing an entry by its place removed another, or left it a place (%d)", it.at)
		}
	}
	last := time.Time{}
	for h.Len() > 0 {
		it := heap.Pop(&h).(*item)
		if it.expires.Before(last) || it.at != -1 {
			t.Fatalf("popped %v after %v, place %d", it.expires, last, it.at)
		}
		last = it.expires
	}
}

// A sweep runs batches until one removes fewer than a batch, and stops
// when its context ends, saying how many were removed.
func TestASweepRunsBatchesUntilOneFallsShortOrItsContextEnds(t *testing.T) {
	left := 2*Batch + 7
	batch := func() int {
		n := min(left, Batch)
		left -= n
		return n
	}
	if n, err := InBatches(t.Context(), batch); n != 2*Batch+7 || err != nil {
		t.Fatalf("InBatches = %d, %v; want %d, nil", n, err, 2*Batch+7)
	}
	ctx, cancel := context.WithCancel(t.Context())
	calls := 0
	n, err := InBatches(ctx, func() int {
		calls++
		cancel()
		return Batch
	})
	if n != Batch || calls != 1 || !errors.Is(err, context.Canceled) {
		t.Fatalf("InBatches after its context ended = %d, %v after %d batches; want %d, context.Canceled after 1", n, err, calls, Batch)
	}
}
