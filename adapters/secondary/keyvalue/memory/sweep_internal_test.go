package memory

import (
	"fmt"
	"testing"
	"time"
)

// A sweep looks at a batch at a time and goes on while batches find many
// expired entries: it removes every one of a crowd of expired entries,
// across batches, and looks at no more than a batch under one hold of the
// lock.
func TestASweepGoesBatchByBatch(t *testing.T) {
	s := New()
	past := time.Now().Add(-time.Second)
	for i := range 20 * sweepBatch {
		s.entries[fmt.Sprint("gone/", i)] = entry{value: []byte("v"), expires: past}
	}
	for i := range 10 {
		s.entries[fmt.Sprint("kept/", i)] = entry{value: []byte("v")}
	}
	first, looked := s.sweep(time.Now())
	if looked != sweepBatch || first < sweepBatch-10 {
		t.Fatalf("one batch removed %d after looking at %d; want a batch of %d, nearly all expired", first, looked, sweepBatch)
	}
	n, err := s.DeleteExpired(t.Context())
	if err != nil || first+n != 20*sweepBatch || len(s.entries) != 10 {
		t.Fatalf("DeleteExpired = %d, %v, leaving %d entries; want the rest of the %d expired gone and the 10 live kept", n, err, len(s.entries), 20*sweepBatch)
	}
}
