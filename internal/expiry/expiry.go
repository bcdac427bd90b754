// Package expiry holds what the stores that expire entries share: how
// much one hold of a store's lock may remove, so that calls go on during a
// sweep, and the heap that names the entries to expire first.
package expiry

import (
	"context"
	"time"
)

// Batch is how many entries a sweep looks at under one hold of the lock:
// calls go on between batches.
const Batch = 256

// InBatches runs a sweep: batch removes up to Batch expired entries under
// one hold of its store's lock and says how many it removed; InBatches
// calls it until one removes fewer, or ctx ends, and returns how many
// were removed in all.
func InBatches(ctx context.Context, batch func() int) (int, error) {
	deleted := 0
	for {
		if err := ctx.Err(); err != nil {
			return deleted, err
		}
		n := batch()
		deleted += n
		if n < Batch {
			return deleted, nil
		}
	}
}

// Expiring is what a Heap orders: an entry that knows when it expires and
// keeps its own place in the heap, so that a write may remove or move it
// without a search.
type Expiring interface {
	ExpiresAt() time.Time
	// Place records the entry's index in the heap, -1 once it left it.
	Place(at int)
}

// Heap orders entries by when they expire, the soonest first; it is meant
// for container/heap.
type Heap[E Expiring] []E

func (h Heap[E]) Len() int           { return len(h) }
func (h Heap[E]) Less(i, j int) bool { return h[i].ExpiresAt().Before(h[j].ExpiresAt()) }
func (h Heap[E]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].Place(i)
	h[j].Place(j)
}

func (h *Heap[E]) Push(x any) {
	e := x.(E)
	e.Place(len(*h))
	*h = append(*h, e)
}

func (h *Heap[E]) Pop() any {
	old := *h
	e := old[len(old)-1]
	var zero E
	old[len(old)-1] = zero
	e.Place(-1)
	*h = old[:len(old)-1]
	return e
}
