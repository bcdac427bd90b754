package memory

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/abi-engine/engine/ports"
)

// An upsert puts its batch into the search index, copying and normalising
// every vector, most of a large upsert's time, without holding its
// collection's lock: a search, a get and a count on the same collection go
// on while it does, and see the collection as it was, the batch not at all.
// The batch is then seen whole. Before, the upsert held the collection's
// lock (the store's, before collections had their own) while the index
// took the batch, 0.1 to 1 s for 50,000 vectors of dimension 384, and
// every search on the collection waited.
func TestASearchGoesOnWhileAnUpsertIntoItsCollectionIsIndexed(t *testing.T) {
	ctx := t.Context()
	s := open(t, "a")
	if err := s.Upsert(ctx, "a", []ports.Vector{{ID: "x", Values: []float32{1, 0}}}); err != nil {
		t.Fatal(err)
	}
	held, released := make(chan struct{}), make(chan struct{})
	var once, releaseOnce sync.Once
	s.hooks.staged = func(string) {
		once.Do(func() {
			close(held)
			<-released
		})
	}
	release := func() { releaseOnce.Do(func() { close(released) }) }
	t.Cleanup(release)
	upserted := make(chan error, 1)
	go func() {
		upserted <- s.Upsert(ctx, "a", []ports.Vector{{ID: "x", Values: []float32{0, 1}}, {ID: "v", Values: []float32{0, 1}}})
	}()
	select {
	case <-held:
	case err := <-upserted:
		t.Fatalf("the upsert returned %v without being held", err)
	case <-time.After(wait):
		t.Fatal("the upsert did not put its batch into the index")
	}

	type answer struct {
		found []ports.ScoredVector
		err   error
	}
	searched := make(chan answer, 1)
	go func() {
		r, err := s.Search(ctx, "a", []float32{0, 1}, 2, nil)
		searched <- answer{r, err}
	}()
	var a answer
	select {
	case a = <-searched:
	case <-time.After(wait):
		t.Fatal("a search waited for an upsert into its collection to be indexed")
	}
	if a.err != nil || len(a.found) != 1 || a.found[0].ID != "x" || a.found[0].Values[0] != 1 {
		t.Fatalf("a search while an upsert is indexed = %+v, %v; want x alone, as it was", a.found, a.err)
	}
	if _, err := s.Get(ctx, "a", "v"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Get of a vector of the batch being indexed = %v, want ErrNotFound", err)
	}
	if n, err := s.Count(ctx, "a"); err != nil || n != 1 {
		t.Fatalf("Count while an upsert is indexed = %d, %v; want 1", n, err)
	}
	release()
	if err := <-upserted; err != nil {
		t.Fatalf("the upsert: %v", err)
	}
	r, err := s.Search(ctx, "a", []float32{0, 1}, 2, nil)
	if err != nil || len(r) != 2 || r[0].Values[1] != 1 || r[1].Values[1] != 1 {
		t.Fatalf("a search after the upsert = %+v, %v; want v and the new x", r, err)
	}
}

// Upserts of the same ids from several callers at once leave the index
// holding what the store holds for each id: the last write of an id to
// the store is the last to the index too. An exact search for each stored
// vector's own values finds that vector first, at a cosine of 1.
func TestUpsertsOfTheSameIdsAtOnceLeaveTheIndexAgreeingWithTheStore(t *testing.T) {
	ctx := t.Context()
	s := open(t)
	const dim, ids = 16, 200
	if err := s.CreateCollection(ctx, "a", dim, ports.MetricCosine); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for range 50 {
				batch := make([]ports.Vector, 0, ids/2)
				for range ids / 2 {
					v := make([]float32, dim)
					for i := range v {
						v[i] = r.Float32()*2 - 1
					}
					batch = append(batch, ports.Vector{ID: fmt.Sprint(r.IntN(ids)), Values: v})
				}
				if err := s.Upsert(ctx, "a", batch); err != nil {
					t.Errorf("Upsert: %v", err)
				}
			}
		})
	}
	wg.Wait()
	for i := range ids {
		v, err := s.Get(ctx, "a", fmt.Sprint(i))
		if errors.Is(err, ports.ErrNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("Get(%d): %v", i, err)
		}
		r, err := s.Search(ctx, "a", v.Values, 1, nil)
		if err != nil || len(r) != 1 || r[0].ID != v.ID || r[0].Score < 0.999 {
			t.Fatalf("a search for %s's own values = %+v, %v; want %s at a cosine of 1", v.ID, r, err, v.ID)
		}
	}
}
