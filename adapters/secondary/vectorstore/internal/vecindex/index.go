// Package vecindex is the in-memory search structure the vector store
// adapters share: a collection's vectors as contiguous float32 (normalised
// for cosine), an exact scan with a bounded heap, payload filters checked
// before scoring, and above a size threshold an HNSW graph for approximate
// search. The adapters keep the data itself (in SQLite or in maps) and
// rescore the candidates the index gives them.
package vecindex

import (
	"cmp"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/abi-engine/engine/ports"
)

// DefaultThreshold is how many vectors a collection holds before it gets an
// HNSW graph: an exact scan of 50,000 vectors of dimension 384 takes about
// 5 ms on one core with the AVX2 kernel (15 ms without), and the graph
// keeps the time nearly flat past it.
const DefaultThreshold = 50_000

// chunkSlots is how many vectors one block of storage holds: blocks keep
// the scan over contiguous memory without copying every vector when the
// collection grows. The last block grows as vectors come, doubling, so a
// collection of a few vectors holds about their size, not a whole block
// (32 MiB at the largest dimension).
const chunkSlots = 1024

// buildSlice is how long the graph builder holds the write lock at a time,
// so searches and upserts interleave with a long build.
const buildSlice = 2 * time.Millisecond

// Options tune an index.
type Options struct {
	// Threshold is the number of vectors above which the collection is
	// searched through an HNSW graph; the graph is dropped when the
	// collection shrinks below half of it. Zero means DefaultThreshold, a
	// negative value never builds one.
	Threshold int
	// Logger hears of a graph build that panicked; nil means
	// slog.Default().
	Logger *slog.Logger
}

// Candidate is a vector the index found: Distance is lower when closer (the
// negated dot product of the stored, for cosine normalised, values, or the
// squared euclidean distance).
type Candidate struct {
	ID       string
	Distance float64
}

// Index holds one collection. It is safe for concurrent use: searches share
// a read lock, writes and the graph builder take the write lock. A write
// fills the slots of its vectors before it takes the write lock (Stage),
// and then holds it only to make them seen (Publish).
type Index struct {
	// write is held by one writer at a time, from a Stage to its Publish,
	// and through a Remove: only a writer grows the storage, so the
	// slots a staged write fills without mu stay where they are.
	write sync.Mutex

	mu        sync.RWMutex
	dim       int
	metric    ports.Metric
	threshold int

	chunks [][]float32 // slot s is chunks[s/chunkSlots][(s%chunkSlots)*dim:][:dim]; only the last may be short
	ids    []string    // "" for a slot that holds no live vector
	terms  [][]uint32  // each slot's payload terms, sorted
	slots  map[string]int32
	free   []int32 // slots to reuse; never one the graph still links
	dict   *terms
	live   int

	g        *graph  // nil while the collection is searched exactly
	pending  []int32 // slots waiting to be put into g
	building bool
	closed   bool
	wg       sync.WaitGroup
	log      *slog.Logger

	// hooks are points of the builder where tests stop it; nil outside
	// tests.
	hooks struct {
		insert func(s int32) // the builder is about to put slot s into the graph
	}
}

// New makes an empty index for vectors of dimension dim under metric m.
func New(dim int, m ports.Metric, o Options) *Index {
	t := o.Threshold
	if t == 0 {
		t = DefaultThreshold
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Index{dim: dim, metric: m, threshold: t, slots: map[string]int32{}, dict: newTerms(), log: log}
}

// Close stops the graph builder and waits for it.
func (x *Index) Close() {
	x.mu.Lock()
	x.closed = true
	x.mu.Unlock()
	x.wg.Wait()
}

// Len is the number of vectors held.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.live
}

// Approximate reports whether searches go through the graph now.
func (x *Index) Approximate() bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.g != nil
}

// Entry is one vector to put: Payload as after a JSON round trip.
type Entry struct {
	ID      string
	Values  []float32
	Payload map[string]any
}

func (x *Index) vec(s int32) []float32 {
	off := int(s%chunkSlots) * x.dim
	return x.chunks[s/chunkSlots][off : off+x.dim : off+x.dim]
}

// newSlot hands out a free slot, growing the storage by a block when none
// is left.
func (x *Index) newSlot() int32 {
	if n := len(x.free); n > 0 {
		s := x.free[n-1]
		x.free = x.free[:n-1]
		return s
	}
	s := int32(len(x.ids))
	if int(s)%chunkSlots == 0 {
		x.chunks = append(x.chunks, make([]float32, 0, x.dim))
	}
	last := &x.chunks[len(x.chunks)-1]
	if len(*last)+x.dim > cap(*last) {
		grown := make([]float32, len(*last), min(2*cap(*last), chunkSlots*x.dim))
		copy(grown, *last)
		*last = grown
	}
	*last = (*last)[:len(*last)+x.dim]
	x.ids = append(x.ids, "")
	x.terms = append(x.terms, nil)
	return s
}

// grown returns the blocks of storage chunks, which hold base slots, with
// room for fresh slots more: the last block grown, or new ones added, as
// newSlot would, but at once. The blocks chunks holds are not changed,
// nor the slots they hold copied over, so no lock is needed while no other
// writer grows the storage: searches only read them.
func (x *Index) grown(chunks [][]float32, base, fresh int) [][]float32 {
	out := slices.Clone(chunks)
	end := base + fresh
	for b := base / chunkSlots; b*chunkSlots < end; b++ {
		want := (min(end, (b+1)*chunkSlots) - b*chunkSlots) * x.dim
		switch {
		case b == len(out):
			out = append(out, make([]float32, want))
		case want > cap(out[b]):
			g := make([]float32, want, max(want, min(2*cap(out[b]), chunkSlots*x.dim)))
			copy(g, out[b])
			out[b] = g
		default:
			out[b] = out[b][:want]
		}
	}
	return out
}

// Put inserts or replaces vectors, which the caller has checked.
func (x *Index) Put(entries []Entry) { x.Stage(entries).Publish() }

// Staged is a write whose vectors are in the index's storage, copied and
// normalised, but not yet seen by searches; Publish makes them seen, all at
// once.
type Staged struct {
	x       *Index
	entries []Entry
	// slots[i] is the free slot filled for entries[i], or -1 when the
	// vector is written into its id's slot at Publish: that slot is seen
	// by searches, so it may change only under the write lock. values[i]
	// is then what Publish copies.
	slots  []int32
	values [][]float32
	// keys[i] are entries[i]'s payload's term keys, made by Stage for
	// Publish.
	keys [][]string
	// bulk is set for a batch as large as the index or larger: the
	// index's maps after the write, made by Stage from copies.
	bulk *bulk
}

// bulk is what a large write's Publish swaps in instead of updating the
// index's maps vector by vector under the write lock.
type bulk struct {
	slots map[string]int32
	dict  *terms
	// prev[i] is the slot entries[i]'s id held just before it, as
	// Publish would have found it, or -1 for an id new to the index;
	// terms[i] are entries[i]'s terms in dict.
	prev  []int32
	terms [][]uint32
}

// Stage puts entries, which the caller has checked, into slots no search
// looks at, holding the write lock only to take the slots: copying and
// normalising the values, most of a large write's time, holds up no
// search. A vector replacing one of its id goes into a new slot too while
// the graph links the old one, as Publish then needs a new slot for it;
// otherwise Publish writes it over the old one, so that replacing a
// collection does not double what its storage takes.
//
// For a batch as large as the index or larger, the index's maps are made
// here too (plan), so that Publish swaps them in instead of updating them
// vector by vector under the write lock.
//
// The caller must call Publish on what Stage returns: the index takes no
// other write until then.
func (x *Index) Stage(entries []Entry) *Staged {
	x.write.Lock()
	st := &Staged{x: x, entries: entries, slots: make([]int32, len(entries)), keys: make([][]string, len(entries))}
	x.mu.Lock()
	fresh := 0
	for i, e := range entries {
		switch s, ok := x.slots[e.ID]; {
		case ok && (x.g == nil || !x.g.has(s)):
			st.slots[i] = -1
		case len(x.free) > 0:
			st.slots[i] = x.free[len(x.free)-1]
			x.free = x.free[:len(x.free)-1]
		default:
			st.slots[i] = int32(len(x.ids) + fresh)
			fresh++
		}
	}
	base, chunks := len(x.ids), x.chunks
	x.mu.Unlock()
	// Allocating the storage, the most of a large write into a new
	// collection, is done without mu as well: no other writer changes it.
	chunks = x.grown(chunks, base, fresh)
	x.mu.Lock()
	x.chunks = chunks
	x.ids = append(x.ids, make([]string, fresh)...)
	x.terms = append(x.terms, make([][]uint32, fresh)...)
	x.mu.Unlock()
	// Without mu: only a writer grows the storage, and this one holds
	// write, and no search reads a slot that holds no id.
	for i, e := range entries {
		var v []float32
		if s := st.slots[i]; s >= 0 {
			v = x.vec(s)
		} else {
			if st.values == nil {
				st.values = make([][]float32, len(entries))
			}
			v = make([]float32, x.dim)
			st.values[i] = v
		}
		copy(v, e.Values)
		if x.metric == ports.MetricCosine {
			normalize(v)
		}
		st.keys[i] = termKeys(e.Payload)
	}
	if len(entries) >= len(x.slots) {
		st.bulk = x.plan(st)
	}
	return st
}

// plan makes, without mu, the maps a staged write leaves, from copies of
// the index's: copying them costs no more than a batch this large's own
// inserts, and Publish then swaps them in. Only a writer changes the maps
// and the slots' terms, and this one holds write.
//
// Each vector is planned into the slot Stage chose for it, or, for -1,
// its id's slot. The dictionary does not depend on the slot: either way
// Publish drops the terms the id held and adds the new ones, in batch
// order, so an id twice in the batch drops the terms its first entry
// added.
func (x *Index) plan(st *Staged) *bulk {
	b := &bulk{
		slots: maps.Clone(x.slots),
		dict:  x.dict.clone(),
		prev:  make([]int32, len(st.entries)),
		terms: make([][]uint32, len(st.entries)),
	}
	last := make(map[string]int, len(st.entries)) // an id's latest entry in the batch
	for i, e := range st.entries {
		b.prev[i] = -1
		if s, ok := b.slots[e.ID]; ok {
			b.prev[i] = s
			if j, seen := last[e.ID]; seen {
				b.dict.drop(b.terms[j])
			} else {
				b.dict.drop(x.terms[s])
			}
		}
		s := st.slots[i]
		if s < 0 {
			s = b.prev[i]
		}
		b.slots[e.ID] = s
		b.terms[i] = b.dict.add(st.keys[i])
		last[e.ID] = i
	}
	return b
}

// Publish makes a staged write seen by searches, and ends it.
func (st *Staged) Publish() {
	x := st.x
	defer x.write.Unlock()
	x.mu.Lock()
	defer x.mu.Unlock()
	if st.bulk != nil {
		st.publishBulk()
		return
	}
	for i, e := range st.entries {
		s, ok := x.slots[e.ID]
		if st.slots[i] >= 0 || (x.g != nil && x.g.has(s)) {
			// A vector in a slot of its own, or one whose old slot the
			// builder has put into the graph since Stage: the graph's
			// links were chosen for the old values, so the old slot
			// stays as a waypoint until the graph is rebuilt.
			if ok {
				x.kill(s)
			}
			s = st.slots[i]
			if s < 0 {
				s = x.newSlot()
				copy(x.vec(s), st.values[i])
			}
			x.ids[s] = e.ID
			x.slots[e.ID] = s
			x.live++
			if x.g != nil {
				x.pending = append(x.pending, s)
			}
		} else {
			x.dict.drop(x.terms[s])
			copy(x.vec(s), st.values[i])
		}
		x.terms[s] = x.dict.add(st.keys[i])
	}
	x.reshape()
}

// publishBulk is Publish for a planned write: the slots change as
// Publish's loop would change them, and the planned maps replace the
// index's. One case the plan could not see: the builder may have put an
// id's old slot into the graph since Stage, and then the vector needs a
// new slot, as in Publish's loop, and the id's entry in the planned map,
// and the slot later entries of the id find, move to it.
func (st *Staged) publishBulk() {
	x, b := st.x, st.bulk
	var moved map[string]int32
	for i, e := range st.entries {
		s := b.prev[i]
		if m, ok := moved[e.ID]; ok {
			s = m
		}
		if st.slots[i] >= 0 || (s >= 0 && x.g != nil && x.g.has(s)) {
			if s >= 0 {
				x.vacate(s)
			}
			s = st.slots[i]
			if s < 0 {
				s = x.newSlot()
				copy(x.vec(s), st.values[i])
				if moved == nil {
					moved = map[string]int32{}
				}
				moved[e.ID] = s
			}
			x.ids[s] = e.ID
			x.live++
			if x.g != nil {
				x.pending = append(x.pending, s)
			}
		} else {
			copy(x.vec(s), st.values[i])
			if _, ok := moved[e.ID]; ok {
				moved[e.ID] = s
			}
		}
		x.terms[s] = b.terms[i]
	}
	for id, s := range moved {
		b.slots[id] = s
	}
	x.slots, x.dict = b.slots, b.dict
	x.reshape()
}

// Remove deletes the vectors with these ids; missing ids are ignored.
func (x *Index) Remove(ids []string) {
	x.write.Lock()
	defer x.write.Unlock()
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, id := range ids {
		if s, ok := x.slots[id]; ok {
			x.kill(s)
		}
	}
	x.reshape()
}

// kill takes a live slot out; a slot the graph links stays reserved.
func (x *Index) kill(s int32) {
	x.dict.drop(x.terms[s])
	delete(x.slots, x.ids[s])
	x.vacate(s)
}

// vacate is kill but for the maps, which a planned write has updated.
func (x *Index) vacate(s int32) {
	x.terms[s] = nil
	x.ids[s] = ""
	x.live--
	if x.g != nil && x.g.has(s) {
		x.g.dead++
		return
	}
	x.free = append(x.free, s)
}

// reshape builds, rebuilds or drops the graph as the collection's size and
// its share of dead waypoints ask, and starts the builder when there is
// work for it.
func (x *Index) reshape() {
	switch {
	case x.g == nil && x.threshold > 0 && x.live > x.threshold:
		x.resetGraph()
	case x.g != nil && x.live < x.threshold/2:
		x.dropGraph()
	case x.g != nil && x.g.dead > x.live:
		x.resetGraph()
	}
	if x.g != nil && len(x.pending) > 0 && !x.building && !x.closed {
		x.building = true
		x.wg.Add(1)
		go x.build()
	}
}

// dropGraph returns to exact search and frees the slots only the graph
// kept.
func (x *Index) dropGraph() {
	for s, id := range x.ids {
		if id == "" && x.g.has(int32(s)) {
			x.free = append(x.free, int32(s))
		}
	}
	x.g = nil
	x.pending = nil
}

// resetGraph starts an empty graph and queues every live vector for it;
// until the builder has put a vector in, searches score it exactly.
func (x *Index) resetGraph() {
	if x.g != nil {
		x.dropGraph()
	}
	x.g = newGraph(x)
	x.pending = x.pending[:0]
	for s, id := range x.ids {
		if id != "" {
			x.pending = append(x.pending, int32(s))
		}
	}
}

// build puts the pending vectors into the graph, a slice of time at a
// time.
func (x *Index) build() {
	defer x.wg.Done()
	for x.buildSlice() {
		runtime.Gosched()
	}
}

// buildSlice puts pending vectors into the graph for one slice of time,
// under the write lock, and reports whether the builder goes on.
//
// It runs on the builder's own goroutine, where a panic (a bug, or values
// that break the graph's code) would end the process, and with it an
// engine that holds the lease, with no release and no drain. So a panic
// gives the graph up instead: the graph it left half built is dropped,
// never searched as if whole, and the collection is searched exactly from
// then on, which is slower but answers the same.
func (x *Index) buildSlice() (more bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	defer func() {
		if p := recover(); p != nil {
			x.log.Error("the build of a vector search graph panicked; the collection is searched exactly from now on",
				"dimension", x.dim, "metric", x.metric, "vectors", x.live,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			x.dropGraph()
			x.threshold = -1
			x.building = false
			more = false
		}
	}()
	if x.closed || x.g == nil || len(x.pending) == 0 {
		x.building = false
		return false
	}
	end := time.Now().Add(buildSlice)
	for len(x.pending) > 0 && time.Now().Before(end) {
		s := x.pending[0]
		x.pending = x.pending[1:]
		if x.ids[s] != "" && !x.g.has(s) {
			if x.hooks.insert != nil {
				x.hooks.insert(s)
			}
			x.g.insert(s)
		}
	}
	return true
}

// Built reports whether every vector is in the graph (or there is no
// graph), for tests that wait for the builder.
func (x *Index) Built() bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.g == nil || len(x.pending) == 0
}

// Indexed is how many live vectors the graph holds; 0 without a graph.
func (x *Index) Indexed() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.g == nil {
		return 0
	}
	return x.g.nodes - x.g.dead
}

// distance is the index's distance from a prepared query to slot s.
func (x *Index) distance(q []float32, s int32) float32 {
	if x.metric == ports.MetricEuclid {
		return l2(q, x.vec(s))
	}
	return -dot(q, x.vec(s))
}

// tiny is the magnitude below which a float32 distance is summed again in
// float64: products and squares under about 1e-45 round to zero in
// float32, so a sum that small may be all rounding, and every vector that
// near the query would tie. Above it what underflow loses (at most about
// 2^-149 a term, 2^-135 over MaxDimension terms) is far inside the
// rounding error docs/protocol.md allows.
const tiny = 0x1p-100

// finite is d, the float32 distance from q to slot s, when it is finite
// and not tiny, and otherwise the distance summed again in float64:
// values near float32's range overflow a float32 sum (to an infinity, or
// NaN when two products of opposite signs overflow), and values near zero
// underflow it, either of which would leave the candidates unordered.
func (x *Index) finite(q []float32, s int32, d float32) float64 {
	if a := math.Abs(float64(d)); a >= tiny && a <= math.MaxFloat32 {
		return float64(d)
	}
	v := x.vec(s)
	var sum float64
	for i := range q {
		a, b := float64(q[i]), float64(v[i])
		if x.metric == ports.MetricEuclid {
			sum += (a - b) * (a - b)
		} else {
			sum -= a * b
		}
	}
	return sum
}

// Margin is how many candidates beyond k a search returns, so that
// rescoring them in float64 gives the exact top k unless more than Margin
// vectors come within float32 rounding of one of the true k: a sum over d
// dimensions may be off by about (d+2) * 2^-24 of the sum of |q_i * v_i|
// (docs/protocol.md states what an exact search promises).
func Margin(k int) int { return 8 + k/4 }

// Search gives up to k+Margin(k) candidates whose payload has every field
// of filter (already normalised as payloads are), closest first with ties
// broken by id. Below the threshold the scan is exact.
func (x *Index) Search(query []float32, k int, filter map[string]any) []Candidate {
	q := slices.Clone(query)
	if x.metric == ports.MetricCosine {
		normalize(q)
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	var want []uint32
	if len(filter) > 0 {
		var ok bool
		if want, ok = x.dict.lookup(filter); !ok {
			return nil
		}
	}
	top := topK{n: k + Margin(k), ids: x.ids}
	if x.g == nil {
		x.scan(q, want, &top, false)
		return top.sorted()
	}
	share := 1.0
	if len(want) > 0 {
		n := x.matching(want)
		if n <= x.threshold {
			// A filter that leaves no more than the threshold is
			// answered exactly over what it leaves.
			x.scan(q, want, &top, false)
			return top.sorted()
		}
		share = float64(n) / float64(x.live)
	}
	x.g.search(q, want, share, &top)
	x.scan(q, want, &top, true)
	return top.sorted()
}

// matching counts the live vectors holding every wanted term.
func (x *Index) matching(want []uint32) int {
	n := 0
	for s, id := range x.ids {
		if id != "" && holds(x.terms[s], want) {
			n++
		}
	}
	return n
}

// scan scores every live slot that holds the wanted terms; with
// outsideGraph only those the graph does not hold yet.
func (x *Index) scan(q []float32, want []uint32, top *topK, outsideGraph bool) {
	if outsideGraph && len(x.pending) == 0 {
		return
	}
	for s, id := range x.ids {
		if id == "" || (len(want) > 0 && !holds(x.terms[s], want)) {
			continue
		}
		if outsideGraph && x.g.has(int32(s)) {
			continue
		}
		top.offer(int32(s), x.finite(q, int32(s), x.distance(q, int32(s))))
	}
}

// topK keeps the n closest slots seen, the farthest on top of a max-heap;
// equal distances are ordered by id so an exact search is deterministic.
type topK struct {
	n    int
	ids  []string
	heap []tcand
}

// cand is a slot and its float32 distance, as the graph orders them.
type cand struct {
	slot int32
	d    float32
}

// tcand is a slot and its distance as the search's top k orders them.
type tcand struct {
	slot int32
	d    float64
}

// farther orders a after b: the heap's top is the farthest.
func (t *topK) farther(a, b tcand) bool {
	return a.d > b.d || (a.d == b.d && t.ids[a.slot] > t.ids[b.slot])
}

func (t *topK) offer(s int32, d float64) {
	c := tcand{s, d}
	if len(t.heap) < t.n {
		t.heap = append(t.heap, c)
		t.up(len(t.heap) - 1)
		return
	}
	if d > t.heap[0].d || !t.farther(t.heap[0], c) {
		return
	}
	t.heap[0] = c
	t.down(0)
}

func (t *topK) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !t.farther(t.heap[i], t.heap[p]) {
			return
		}
		t.heap[i], t.heap[p] = t.heap[p], t.heap[i]
		i = p
	}
}

func (t *topK) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(t.heap) {
			return
		}
		m := l
		if r := l + 1; r < len(t.heap) && t.farther(t.heap[r], t.heap[l]) {
			m = r
		}
		if !t.farther(t.heap[m], t.heap[i]) {
			return
		}
		t.heap[i], t.heap[m] = t.heap[m], t.heap[i]
		i = m
	}
}

func (t *topK) sorted() []Candidate {
	slices.SortFunc(t.heap, func(a, b tcand) int {
		if c := cmp.Compare(a.d, b.d); c != 0 {
			return c
		}
		return cmp.Compare(t.ids[a.slot], t.ids[b.slot])
	})
	out := make([]Candidate, len(t.heap))
	for i, c := range t.heap {
		out[i] = Candidate{ID: t.ids[c.slot], Distance: c.d}
	}
	return out
}
