package expiry

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// A sweep looks at a batch at a time and goes on while batches find many
// expired entries: it removes every one of a crowd of expired entries,
// across batches, keeps the live ones, and looks at no more than a batch
// under one hold of the lock.
func TestASweepGoesBatchByBatch(t *testing.T) {
	var mu sync.Mutex
	m := map[string]time.Time{}
	past := time.Now().Add(-time.Second)
	for i := range 20 * Batch {
		m[fmt.Sprint("gone/", i)] = past
	}
	for i := range 10 {
		m[fmt.Sprint("kept/", i)] = time.Time{}
	}
	entries := func() map[string]time.Time { return m }
	expired := func(_ string, at, now time.Time) bool { return !at.IsZero() && !now.Before(at) }
	first, looked := batch(&mu, entries, expired)
	if looked != Batch || first < Batch-10 {
		t.Fatalf("one batch removed %d after looking at %d; want a batch of %d, nearly all expired", first, looked, Batch)
	}
	n, err := Sweep(t.Context(), &mu, entries, expired)
	if err != nil || first+n != 20*Batch || len(m) != 10 {
		t.Fatalf("Sweep = %d, %v, leaving %d entries; want the rest of the %d expired gone and the 10 live kept", n, err, len(m), 20*Batch)
	}
	// Among many live entries a batch finds few expired: the sweep stops.
	for i := range 10 * Batch {
		m[fmt.Sprint("live/", i)] = time.Time{}
	}
	m["gone/last"] = past
	if n, err := Sweep(t.Context(), &mu, entries, expired); err != nil || n > 1 {
		t.Fatalf("Sweep among live entries = %d, %v", n, err)
	}
}
