package memory

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/abi-engine/engine/internal/expiry"
)

// wait is how long a test waits for an event before it fails: generous,
// since a call that goes on does so at once, and one that is held up
// waits until the test lets the set go.
const wait = 20 * time.Second

// full opens a cache of room for n entries of one byte and fills it with
// them, keys k0000 (the least recently used) to k<n-1>.
func full(t *testing.T, n int) *Store {
	t.Helper()
	s, err := Open(t.Context(), Config{MaxBytes: int64(n) * (5 + 1 + EntryOverhead)})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	for i := range n {
		if err := s.Set(t.Context(), fmt.Sprintf("k%04d", i), []byte("v"), 0); err != nil {
			t.Fatalf("Set: %v", err)
		}
	}
	return s
}

// holdAfterFirstBatch makes the first set that evicts over several holds
// of the lock stop after its first batch: held is closed then, and the
// set goes on once release is called.
func holdAfterFirstBatch(t *testing.T, s *Store) (held <-chan struct{}, release func()) {
	h, r := make(chan struct{}), make(chan struct{})
	var once, releaseOnce sync.Once
	s.hooks.evicted = func() {
		once.Do(func() {
			close(h)
			<-r
		})
	}
	release = func() { releaseOnce.Do(func() { close(r) }) }
	t.Cleanup(release)
	return h, release
}

func within[T any](t *testing.T, what string, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(wait):
		t.Fatalf("%s did not happen within %v", what, wait)
		panic("unreachable")
	}
}

// A set of a value as large as the cache evicts every entry, half a
// million of them in a default cache of small ones, which took 0.75 s
// under the lock, holding up every call on every key. It evicts a batch
// under one hold of the lock now: a get and a set of other keys go on
// between its batches, and the room it has freed stays its own.
func TestALargeSetDoesNotHoldUpOtherCallsWhileItEvicts(t *testing.T) {
	const n = 4 * expiry.Batch
	s := full(t, n)
	held, release := holdAfterFirstBatch(t, s)
	big := bytes.Repeat([]byte("x"), int(s.max-int64(len("big"))-EntryOverhead))
	set := make(chan error, 1)
	go func() { set <- s.Set(t.Context(), "big", big, 0) }()
	select {
	case <-held:
	case err := <-set:
		t.Fatalf("the large set returned %v without evicting in batches", err)
	case <-time.After(wait):
		t.Fatal("the large set did not evict its first batch")
	}

	newest := fmt.Sprintf("k%04d", n-1)
	got := make(chan error, 1)
	go func() {
		_, err := s.Get(t.Context(), newest)
		got <- err
	}()
	if err := within(t, "a get while a large set evicts", got); err != nil {
		t.Fatalf("Get(%s) while a large set evicts: %v", newest, err)
	}
	small := make(chan error, 1)
	go func() { small <- s.Set(t.Context(), "small", []byte("v"), 0) }()
	if err := within(t, "a small set while a large set evicts", small); err != nil {
		t.Fatalf("a small set while a large set evicts: %v", err)
	}
	checkBound(t, s)

	release()
	if err := within(t, "the large set", set); err != nil {
		t.Fatalf("the large set: %v", err)
	}
	if v, err := s.Get(t.Context(), "big"); err != nil || !bytes.Equal(v, big) {
		t.Fatalf("Get(big) after the large set = %d bytes, %v; want its %d", len(v), err, len(big))
	}
	if ok, _ := s.Exists(t.Context(), newest); ok {
		t.Fatalf("%s is still held beside an entry that takes the whole cache", newest)
	}
	checkBound(t, s)
}

// A set_if_absent that makes its room over several batches stores nothing,
// and reports so, when a call between its batches stored its key.
func TestASetIfAbsentThatEvictsInBatchesLosesToASetOfItsKeyBetweenThem(t *testing.T) {
	s := full(t, 4*expiry.Batch)
	held, release := holdAfterFirstBatch(t, s)
	big := bytes.Repeat([]byte("x"), int(s.max/2))
	first := make(chan bool, 1)
	go func() {
		ok, err := s.SetIfAbsent(t.Context(), "key", big, 0)
		if err != nil {
			t.Errorf("the large SetIfAbsent: %v", err)
		}
		first <- ok
	}()
	within(t, "the large set_if_absent's first batch", held)
	if ok, err := s.SetIfAbsent(t.Context(), "key", []byte("small"), 0); !ok || err != nil {
		t.Fatalf("a small SetIfAbsent of an absent key = %v, %v; want true", ok, err)
	}
	release()
	if within(t, "the large set_if_absent", first) {
		t.Fatal("the large SetIfAbsent stored its entry over one stored meanwhile")
	}
	if v, err := s.Get(t.Context(), "key"); err != nil || string(v) != "small" {
		t.Fatalf("Get(key) = %q, %v; want the small value", v, err)
	}
	checkBound(t, s)
}

// A set over a key that makes its room over several batches leaves the
// key's old value readable until the new one is in. Before, the set dropped
// the old entry first, and a get of the key between its batches found
// nothing. The key is the least recently used, which the set's own
// eviction would drop first were the old entry not set aside.
func TestASetOverAKeyThatEvictsInBatchesLeavesTheOldValueReadable(t *testing.T) {
	s := full(t, 4*expiry.Batch)
	held, release := holdAfterFirstBatch(t, s)
	const key = "k0000"
	big := bytes.Repeat([]byte("x"), int(s.max-int64(len(key))-EntryOverhead))
	set := make(chan error, 1)
	go func() { set <- s.Set(t.Context(), key, big, 0) }()
	select {
	case <-held:
	case err := <-set:
		t.Fatalf("the large set returned %v without evicting in batches", err)
	case <-time.After(wait):
		t.Fatal("the large set did not evict its first batch")
	}
	got := make(chan error, 1)
	go func() {
		v, err := s.Get(t.Context(), key)
		if err == nil && string(v) != "v" {
			err = fmt.Errorf("found %q, want the old value", v)
		}
		got <- err
	}()
	if err := within(t, "a get of the key while a set of it evicts", got); err != nil {
		t.Fatalf("Get(%s) while a set of it evicts: %v", key, err)
	}
	checkBound(t, s)

	release()
	if err := within(t, "the large set", set); err != nil {
		t.Fatalf("the large set: %v", err)
	}
	if v, err := s.Get(t.Context(), key); err != nil || !bytes.Equal(v, big) {
		t.Fatalf("Get(%s) after the large set = %d bytes, %v; want its %d", key, len(v), err, len(big))
	}
	checkBound(t, s)
}

// A delete of the key that a set making its room over several batches
// replaces leaves the set to make room for all of its entry, and the
// entries stay within max_bytes.
func TestADeleteOfTheKeyBetweenTheBatchesOfItsSetKeepsTheBound(t *testing.T) {
	s := full(t, 4*expiry.Batch)
	held, release := holdAfterFirstBatch(t, s)
	const key = "k0000"
	big := bytes.Repeat([]byte("x"), int(s.max-int64(len(key))-EntryOverhead))
	set := make(chan error, 1)
	go func() { set <- s.Set(t.Context(), key, big, 0) }()
	within(t, "the large set's first batch", held)
	if ok, err := s.Delete(t.Context(), key); !ok || err != nil {
		t.Fatalf("Delete(%s) while a set of it evicts = %v, %v; want true", key, ok, err)
	}
	checkBound(t, s)
	release()
	if err := within(t, "the large set", set); err != nil {
		t.Fatalf("the large set: %v", err)
	}
	if v, err := s.Get(t.Context(), key); err != nil || !bytes.Equal(v, big) {
		t.Fatalf("Get(%s) after the large set = %d bytes, %v; want its %d", key, len(v), err, len(big))
	}
	checkBound(t, s)
}

// Sets that each need many batches, from several callers at once, all
// complete, and the entries never pass max_bytes.
func TestConcurrentLargeSetsAllCompleteWithinTheBound(t *testing.T) {
	s := full(t, 4*expiry.Batch)
	var checks sync.WaitGroup
	s.hooks.evicted = func() {
		checks.Go(func() { checkBound(t, s) })
	}
	var sets sync.WaitGroup
	for g := range 4 {
		sets.Go(func() {
			for i := range 5 {
				key, big := fmt.Sprintf("big%d/%d", g, i), bytes.Repeat([]byte("x"), int(s.max/3))
				if err := s.Set(t.Context(), key, big, 0); err != nil {
					t.Errorf("Set(%s): %v", key, err)
				}
				for j := range 2 * expiry.Batch {
					if err := s.Set(t.Context(), fmt.Sprintf("s%d/%d/%04d", g, i, j), []byte("v"), 0); err != nil {
						t.Errorf("small Set: %v", err)
					}
				}
			}
		})
	}
	sets.Wait()
	checks.Wait()
	checkBound(t, s)
}

// Large sets over the same few keys, and deletes and gets of them, from
// several callers at once, all complete, the entries never pass
// max_bytes, and a set of each key after them is found.
func TestConcurrentLargeSetsOverTheSameKeysAllCompleteWithinTheBound(t *testing.T) {
	s := full(t, 4*expiry.Batch)
	var checks sync.WaitGroup
	s.hooks.evicted = func() {
		checks.Go(func() { checkBound(t, s) })
	}
	var sets sync.WaitGroup
	for g := range 4 {
		sets.Go(func() {
			for i := range 10 {
				key := fmt.Sprintf("big%d", i%2)
				if err := s.Set(t.Context(), key, bytes.Repeat([]byte{byte('a' + g)}, int(s.max/3)), 0); err != nil {
					t.Errorf("Set(%s): %v", key, err)
				}
				for j := range expiry.Batch {
					if err := s.Set(t.Context(), fmt.Sprintf("s%d/%d/%04d", g, i, j), []byte("v"), 0); err != nil {
						t.Errorf("small Set: %v", err)
					}
				}
				if g == 3 {
					if _, err := s.Delete(t.Context(), key); err != nil {
						t.Errorf("Delete(%s): %v", key, err)
					}
				}
				s.Get(t.Context(), key)
			}
		})
	}
	sets.Wait()
	checks.Wait()
	checkBound(t, s)
	for _, key := range []string{"big0", "big1"} {
		if err := s.Set(t.Context(), key, []byte("last"), 0); err != nil {
			t.Fatalf("Set(%s): %v", key, err)
		}
		if v, err := s.Get(t.Context(), key); err != nil || string(v) != "last" {
			t.Fatalf("Get(%s) = %q, %v; want the last value set", key, v, err)
		}
	}
	checkBound(t, s)
}

// checkBound fails the test unless the entries take no more than max and
// what the cache counts as used is what they take and the claim.
func checkBound(t *testing.T, s *Store) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var sum int64
	for _, e := range s.entries {
		sum += e.cost()
	}
	if sum > s.max || s.used > s.max || s.used != sum+s.claimed {
		t.Errorf("entries take %d bytes, %d claimed, %d counted as used, of max %d", sum, s.claimed, s.used, s.max)
	}
}
