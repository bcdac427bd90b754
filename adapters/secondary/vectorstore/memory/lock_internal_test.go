package memory

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/abi-engine/engine/ports"
)

// wait is how long a test waits for an event before it fails: generous,
// since a call that goes on does so at once, and one that is held up
// waits until the test lets the other call go.
const wait = 20 * time.Second

func open(t *testing.T, collections ...string) *Store {
	t.Helper()
	s, err := Open(t.Context(), Config{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	for _, c := range collections {
		if err := s.CreateCollection(t.Context(), c, 2, ports.MetricCosine); err != nil {
			t.Fatalf("CreateCollection(%s): %v", c, err)
		}
	}
	return s
}

// An upsert into collection a that has stored its batch and still holds
// a's lock (held there by the test) holds up no call on collection b, nor
// the calls on the list of collections. Before, one lock guarded every
// collection: an upsert held it for writing while the index took its
// batch, about 0.3 s for 50,000 vectors, and a search held it for reading,
// which kept out every write on every collection.
func TestACallOnOneCollectionGoesOnWhileAnUpsertHoldsAnother(t *testing.T) {
	ctx := t.Context()
	s := open(t, "a", "b")
	if err := s.Upsert(ctx, "b", []ports.Vector{{ID: "x", Values: []float32{1, 0}}}); err != nil {
		t.Fatal(err)
	}
	held, released := make(chan struct{}), make(chan struct{})
	var once, releaseOnce sync.Once
	s.hooks.stored = func(c string) {
		if c == "a" {
			once.Do(func() {
				close(held)
				<-released
			})
		}
	}
	release := func() { releaseOnce.Do(func() { close(released) }) }
	t.Cleanup(release)
	upserted := make(chan error, 1)
	go func() { upserted <- s.Upsert(ctx, "a", []ports.Vector{{ID: "v", Values: []float32{0, 1}}}) }()
	select {
	case <-held:
	case err := <-upserted:
		t.Fatalf("the upsert into a returned %v without being held", err)
	case <-time.After(wait):
		t.Fatal("the upsert into a did not store its batch")
	}

	calls := []struct {
		name string
		call func() error
	}{
		{"Get on b", func() error { _, err := s.Get(ctx, "b", "x"); return err }},
		{"Search on b", func() error {
			r, err := s.Search(ctx, "b", []float32{1, 0}, 1, nil)
			if err == nil && (len(r) != 1 || r[0].ID != "x") {
				err = fmt.Errorf("found %+v, want x", r)
			}
			return err
		}},
		{"Count on b", func() error { _, err := s.Count(ctx, "b"); return err }},
		{"Upsert into b", func() error { return s.Upsert(ctx, "b", []ports.Vector{{ID: "y", Values: []float32{1, 1}}}) }},
		{"Delete from b", func() error { return s.Delete(ctx, "b", []string{"y"}) }},
		{"CreateCollection c", func() error { return s.CreateCollection(ctx, "c", 2, ports.MetricEuclid) }},
		{"Collections", func() error { _, err := s.Collections(ctx); return err }},
		{"DeleteCollection c", func() error { return s.DeleteCollection(ctx, "c") }},
	}
	for _, c := range calls {
		done := make(chan error, 1)
		go func() { done <- c.call() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s while an upsert holds a: %v", c.name, err)
			}
		case <-time.After(wait):
			t.Fatalf("%s waited for an upsert into a", c.name)
		}
	}
	release()
	if err := <-upserted; err != nil {
		t.Fatalf("the upsert into a: %v", err)
	}
	if _, err := s.Get(ctx, "a", "v"); err != nil {
		t.Fatalf("Get of the vector upserted into a: %v", err)
	}
}

// Collections made, written and deleted at once, by many callers, under
// the same names, leave the store counting nothing once they are all
// deleted: no write lands in a collection after its delete freed it, and
// none is counted twice.
func TestCollectionsRacingTheirDeletesLeaveNothingCounted(t *testing.T) {
	ctx := t.Context()
	s := open(t)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				name := fmt.Sprint("c", i%3)
				switch (g + i) % 4 {
				case 0:
					if err := s.CreateCollection(ctx, name, 2, ports.MetricCosine); err != nil {
						t.Errorf("CreateCollection(%s): %v", name, err)
					}
				case 1:
					err := s.Upsert(ctx, name, []ports.Vector{{ID: fmt.Sprint("v", i), Values: []float32{1, 0}, Payload: map[string]any{"g": g}}})
					if err != nil && !errors.Is(err, ports.ErrNotFound) {
						t.Errorf("Upsert into %s: %v", name, err)
					}
				case 2:
					if err := s.Delete(ctx, name, []string{fmt.Sprint("v", i-1)}); err != nil && !errors.Is(err, ports.ErrNotFound) {
						t.Errorf("Delete from %s: %v", name, err)
					}
				case 3:
					if err := s.DeleteCollection(ctx, name); err != nil && !errors.Is(err, ports.ErrNotFound) {
						t.Errorf("DeleteCollection(%s): %v", name, err)
					}
				}
			}
		})
	}
	wg.Wait()
	for i := range 3 {
		if err := s.DeleteCollection(ctx, fmt.Sprint("c", i)); err != nil && !errors.Is(err, ports.ErrNotFound) {
			t.Fatalf("DeleteCollection: %v", err)
		}
	}
	if used := s.used.Load(); used != 0 {
		t.Fatalf("with every collection deleted the store counts %d bytes used, want 0", used)
	}
}

// A delete of a collection that waits for an upsert into it keeps the
// collection on the list until it has freed its room: a create of the name
// meanwhile finds the collection there, and once the delete is done finds
// it gone and its room free. Before, the delete took the name off the list
// first and freed the room only once the upsert ended, and a create of the
// name in between, in a store the collection filled, was refused as full.
func TestACollectionLeavesTheListOnlyWithItsRoomFree(t *testing.T) {
	ctx := t.Context()
	vector := int64(len("x")+8*2) + EntryOverhead
	s, err := Open(ctx, Config{MaxBytes: collectionCost("a") + 2*vector})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.CreateCollection(ctx, "a", 2, ports.MetricCosine); err != nil {
		t.Fatal(err)
	}
	if err := s.Upsert(ctx, "a", []ports.Vector{{ID: "x", Values: []float32{1, 0}}}); err != nil {
		t.Fatal(err)
	}
	staged, releaseUpsert := holdOnce(t, &s.hooks.staged)
	upserted := make(chan error, 1)
	go func() { upserted <- s.Upsert(ctx, "a", []ports.Vector{{ID: "y", Values: []float32{0, 1}}}) }()
	select {
	case <-staged:
	case err := <-upserted:
		t.Fatalf("the upsert returned %v without being held", err)
	case <-time.After(wait):
		t.Fatal("the upsert did not stage its batch")
	}
	deleting, releaseDelete := holdOnce(t, &s.hooks.deleting)
	deleted := make(chan error, 1)
	go func() { deleted <- s.DeleteCollection(ctx, "a") }()
	select {
	case <-deleting:
	case <-time.After(wait):
		t.Fatal("the delete did not find the collection")
	}
	releaseDelete()

	if err := s.CreateCollection(ctx, "a", 2, ports.MetricCosine); err != nil {
		t.Fatalf("CreateCollection of a collection being deleted: %v", err)
	}
	releaseUpsert()
	if err := <-upserted; err != nil {
		t.Fatalf("the upsert: %v", err)
	}
	select {
	case err := <-deleted:
		if err != nil {
			t.Fatalf("DeleteCollection: %v", err)
		}
	case <-time.After(wait):
		t.Fatal("the delete did not end once the upsert had")
	}
	if used := s.used.Load(); used != 0 {
		t.Fatalf("with its one collection deleted the store counts %d bytes used, want 0", used)
	}
	if err := s.CreateCollection(ctx, "a", 2, ports.MetricCosine); err != nil {
		t.Fatalf("CreateCollection after the delete: %v", err)
	}
}

// holdOnce sets hook to stop the first call that meets it: held is closed
// then, and the call goes on once release is called.
func holdOnce(t *testing.T, hook *func(string)) (held <-chan struct{}, release func()) {
	h, r := make(chan struct{}), make(chan struct{})
	var once, releaseOnce sync.Once
	*hook = func(string) {
		once.Do(func() {
			close(h)
			<-r
		})
	}
	release = func() { releaseOnce.Do(func() { close(r) }) }
	t.Cleanup(release)
	return h, release
}
