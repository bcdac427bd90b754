package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
)

func openTest(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "kv.sqlite")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func mustGet(t *testing.T, s *Store, key string) string {
	t.Helper()
	v, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get %q: %v", key, err)
	}
	return string(v)
}

// Many callers at once, on keys of their own and on one they share: every
// set returns only once it is written, and the shared key holds one of the
// values set, whole.
func TestGroupCommitWritesEverySetOfConcurrentCallers(t *testing.T) {
	s := openTest(t)
	const callers, each = 64, 50
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for i := range each {
				key := fmt.Sprintf("c%d/%d", c, i)
				if err := s.Set(t.Context(), key, []byte(key), 0); err != nil {
					t.Errorf("Set %q: %v", key, err)
					return
				}
				// A set returned is a set written: a read now sees it.
				if got := mustGet(t, s, key); got != key {
					t.Errorf("Get %q right after its set = %q", key, got)
					return
				}
				if err := s.Set(t.Context(), "shared", []byte(key), 0); err != nil {
					t.Errorf("Set shared: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	var shared string
	if shared = mustGet(t, s, "shared"); len(shared) < 4 {
		t.Fatalf("shared = %q, not one of the values set", shared)
	}
	if got := mustGet(t, s, shared); got != shared {
		t.Fatalf("shared holds %q, which no caller set whole", shared)
	}
}

// A batch whose transaction fails is written set by set, so only the set
// at fault fails; here a NULL key breaks the table's NOT NULL rule in the
// middle of the batch.
func TestGroupCommitAFailingSetFailsAlone(t *testing.T) {
	s := openTest(t)
	ctx := t.Context()
	batch := []*setOp{
		newSetOp(ctx, "a", []byte("1"), expiry(0)),
		newSetOp(ctx, "b", []byte("2"), expiry(0)),
		newSetOp(ctx, "c", []byte("3"), expiry(0)),
	}
	batch[1].args[0] = sql.Named("key", nil)
	s.commit(ctx, batch)
	if batch[1].err == nil {
		t.Fatal("a set with a NULL key succeeded")
	}
	for _, i := range []int{0, 2} {
		if batch[i].err != nil {
			t.Fatalf("set %d failed with its batch: %v", i, batch[i].err)
		}
	}
	if mustGet(t, s, "a") != "1" || mustGet(t, s, "c") != "3" {
		t.Fatal("the sets beside the failing one were not written")
	}
}

// A set whose call ended before its batch was committed is not written,
// and says why; the others of the batch are, even when the ended one
// opened it.
func TestGroupCommitLeavesOutASetWhoseCallEnded(t *testing.T) {
	s := openTest(t)
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	for _, first := range []bool{true, false} {
		gone := newSetOp(ended, "gone", []byte("x"), expiry(0))
		kept := newSetOp(t.Context(), "kept", []byte("y"), expiry(0))
		batch, leader := []*setOp{kept, gone}, kept
		if first {
			batch, leader = []*setOp{gone, kept}, gone
		}
		s.commit(leader.ctx, batch)
		if !errors.Is(gone.err, context.Canceled) {
			t.Fatalf("ended set: err %v, want context.Canceled", gone.err)
		}
		if kept.err != nil {
			t.Fatalf("live set beside an ended one: %v", kept.err)
		}
		if _, err := s.Get(t.Context(), "gone"); err == nil {
			t.Fatal("the set of an ended call was written")
		}
		if mustGet(t, s, "kept") != "y" {
			t.Fatal("the live set was not written")
		}
	}
}
