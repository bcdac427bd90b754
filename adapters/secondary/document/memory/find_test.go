package memory

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/abi-engine/engine/ports"
)

// A find or a count, which decodes every document of its collection, lets
// the calls on other documents go on meanwhile, and answers as the
// collection stood when it began. Before, it held the store's lock while it
// decoded them all, so one caller's find of a large collection held up
// every write and read of every other caller.
func TestAFindLetsOtherCallsGoOnWhileItDecodes(t *testing.T) {
	for _, count := range []bool{false, true} {
		t.Run(map[bool]string{false: "Find", true: "Count"}[count], func(t *testing.T) {
			s := New()
			t.Cleanup(func() { _ = s.Close() })
			ctx := t.Context()
			if err := s.EnsureCollection(ctx, "c"); err != nil {
				t.Fatal(err)
			}
			for i := range 10 {
				if _, err := s.Put(ctx, "c", fmt.Sprintf("d%d", i), map[string]any{"k": "x"}, ports.Cond{}); err != nil {
					t.Fatal(err)
				}
			}
			matching, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			s.hooks.match = func() {
				once.Do(func() {
					close(matching)
					<-release
				})
			}
			var releaseOnce sync.Once
			stop := func() { releaseOnce.Do(func() { close(release) }) }
			t.Cleanup(stop)
			found := make(chan int, 1)
			go func() {
				if count {
					n, err := s.Count(ctx, "c", map[string]any{"k": "x"})
					if err != nil {
						t.Errorf("Count: %v", err)
					}
					found <- n
					return
				}
				docs, _, err := s.Find(ctx, "c", ports.Query{Where: map[string]any{"k": "x"}, Limit: 100})
				if err != nil {
					t.Errorf("Find: %v", err)
				}
				found <- len(docs)
			}()
			<-matching
			wrote := make(chan error, 1)
			go func() {
				_, err := s.Put(ctx, "c", "new", map[string]any{"k": "x"}, ports.Cond{})
				wrote <- err
			}()
			select {
			case err := <-wrote:
				if err != nil {
					t.Fatalf("a put while a find decodes: %v", err)
				}
			case <-time.After(20 * time.Second):
				stop()
				<-wrote
				t.Fatal("a put waited for a find of the same store to decode every document")
			}
			stop()
			if n := <-found; n != 10 {
				t.Fatalf("the find found %d documents, want the 10 there when it began", n)
			}
		})
	}
}

// A find takes its collection as it stands without copying its documents
// under the store's lock: what it allocates before it matches, while it
// holds the lock or just after, does not grow with the documents. Before,
// it copied every document's id and text under the lock, which at the
// default bound (half a million small documents) held up every call on
// the store for a fifth of a second each find.
func TestAFindTakesItsCollectionWithoutCopyingTheDocuments(t *testing.T) {
	const n = 50_000
	s := New()
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	if err := s.EnsureCollection(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := s.Put(ctx, "c", fmt.Sprintf("d%05d", i), nil, ports.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	var before, at runtime.MemStats
	s.hooks.match = func() { runtime.ReadMemStats(&at) }
	runtime.ReadMemStats(&before)
	if got, err := s.Count(ctx, "c", nil); err != nil || got != n {
		t.Fatalf("Count = %d, %v; want %d", got, err, n)
	}
	if took := at.TotalAlloc - before.TotalAlloc; took > 64<<10 {
		t.Fatalf("a count of %d documents allocated %d bytes before it matched them, want no more than 64 KiB, whatever their number", n, took)
	}
}

// TestAGetHoldsUpNoOtherCallWhileItDecodes stops a get while it decodes the
// document it read, as a get of a large document takes long to, and makes
// sure every other call on the store goes on meanwhile: a get decoded under
// the store's lock, so one caller getting a large document again and again
// held up every call on every collection.
func TestAGetHoldsUpNoOtherCallWhileItDecodes(t *testing.T) {
	s := New()
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	for _, c := range []string{"big", "other"} {
		if err := s.EnsureCollection(ctx, c); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(ctx, c, "d", map[string]any{"n": 1.0}, ports.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	decoding, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	s.hooks.decode = func() {
		if first.CompareAndSwap(false, true) {
			close(decoding)
			<-release
		}
	}
	released := sync.OnceFunc(func() { close(release) })
	t.Cleanup(released)
	got := make(chan error, 1)
	go func() {
		_, err := s.Get(ctx, "big", "d")
		got <- err
	}()
	select {
	case <-decoding:
	case <-time.After(30 * time.Second):
		t.Fatal("the get never decoded its document")
	}
	others := make(chan error, 1)
	go func() {
		if _, err := s.Put(ctx, "other", "e", map[string]any{"n": 2.0}, ports.Cond{}); err != nil {
			others <- err
			return
		}
		if d, err := s.Get(ctx, "other", "d"); err != nil || d.Data["n"] != 1.0 {
			others <- fmt.Errorf("Get = %v, %v", d, err)
			return
		}
		_, err := s.Collections(ctx)
		others <- err
	}()
	select {
	case err := <-others:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a put, a get and a listing of collections waited 20 s for a get of another collection's document to decode")
	}
	released()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the stopped get: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the stopped get never returned")
	}
}
