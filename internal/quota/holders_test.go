package quota

import "testing"

// Holders are kept while they hold something. A take of nothing, as a
// zero-byte upload makes, holds nothing, and its give of nothing takes
// nothing back: no holder may be left behind by the two, or one named
// after every connection that ever made such a take would stay for good.
func TestATakeOfNothingLeavesNoHolderBehind(t *testing.T) {
	q := New(100, 40)
	for _, who := range []string{"a on connection _INBOX.1", "b on connection _INBOX.2"} {
		if err := q.Take(who, 0); err != nil {
			t.Fatalf("a take of nothing: %v", err)
		}
		q.Give(who, 0)
	}
	if err := q.Take("c", 10); err != nil {
		t.Fatal(err)
	}
	if err := q.Take("c", 0); err != nil {
		t.Fatalf("a take of nothing by a holder: %v", err)
	}
	q.Give("c", 0)
	q.Give("c", 10)
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.by) != 0 || q.held != 0 {
		t.Fatalf("after every take was given back, %d holders are kept (%v), %d held", len(q.by), q.by, q.held)
	}
}
