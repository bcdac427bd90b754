// Package memory is a vector store held in this process. Search is exact
// up to a collection of Config.IndexThreshold vectors and goes through an
// HNSW graph above it (package vecindex). It is for tests and
// single-process development: its data goes with the process, and it holds
// at most Config.MaxBytes of it.
package memory

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/abi-engine/engine/adapters/secondary/internal/maxbytes"
	"github.com/abi-engine/engine/adapters/secondary/vectorstore/internal/vecindex"
	"github.com/abi-engine/engine/adapters/secondary/vectorstore/internal/vecutil"
	"github.com/abi-engine/engine/ports"
)

// DefaultMaxBytes is the bound of a store whose configuration sets none:
// about 70,000 vectors of dimension 384, past DefaultThreshold, where a
// collection gets its graph.
const DefaultMaxBytes = 256 << 20

// What the store counts against its bound is meant to be no less than
// what it holds on the heap, so that max_bytes bounds the engine's memory
// and not only the bytes callers sent: a flood of small vectors, of
// payloads of many short fields or of empty collections would otherwise
// hold several times its bound. The upkeep below is measured
// (TestTheBoundCountsNoLessThanTheHeapTheStoreHolds), with room for a map
// that has just grown its table.
const (
	// EntryOverhead is what a vector counts besides its id, values and
	// payload: its entries in the collection's map and the index's, its
	// slot in the index and, above the index threshold, its node in the
	// graph, which it is counted for below the threshold too.
	EntryOverhead = 640
	// CollectionOverhead is what a collection counts besides its name: its
	// entry in the store's map, its maps and its index, empty.
	CollectionOverhead = 768
	// PayloadObjectOverhead is what each JSON object in a payload counts
	// besides its fields: the store keeps a payload decoded, as maps, for
	// filters and answers.
	PayloadObjectOverhead = 224
	// PayloadFieldOverhead is what each field of an object in a payload
	// counts besides its text: its slot in the map, its value boxed and,
	// for a field of the payload itself, its term in the index, which a
	// filter looks up.
	PayloadFieldOverhead = 144
	// PayloadElementOverhead is what each element of an array in a
	// payload counts besides its text: its slot and its value boxed.
	PayloadElementOverhead = 80
)

// Config is the block under services.vector_store.config.
type Config struct {
	// MaxBytes bounds what the store holds: each vector counts its id, its
	// values twice (the stored copy and the index's), its payload's JSON
	// text twice (the payload decoded and its terms in the index) with
	// PayloadObjectOverhead for each object in it, PayloadFieldOverhead for
	// each field and PayloadElementOverhead for each element of an array,
	// and EntryOverhead; each collection its
	// name and CollectionOverhead. 0 is DefaultMaxBytes.
	MaxBytes int64 `yaml:"max_bytes"`
	// IndexThreshold is the number of vectors above which a collection is
	// searched through an approximate HNSW graph; 0 means
	// vecindex.DefaultThreshold (50,000), a negative value keeps every
	// search exact.
	IndexThreshold int `yaml:"index_threshold"`
	// Logger hears of a graph build that panicked; nil means
	// slog.Default().
	Logger *slog.Logger `yaml:"-"`
}

// LocalStorage implements ports.StorageConfig: the data lives in this process.
func (Config) LocalStorage() string { return ports.InThisProcess }

// SetLogger implements storage.LoggerSetter.
func (c *Config) SetLogger(log *slog.Logger) { c.Logger = log }

// Default fills in the bound a block left out, so that the resolved
// configuration shows the one the store keeps.
func (c *Config) Default(string) { c.MaxBytes = maxbytes.Default(c.MaxBytes, DefaultMaxBytes) }

// Check refuses a negative bound, naming it under key.
func (c Config) Check(key string) error { return maxbytes.Check(key, c.MaxBytes, DefaultMaxBytes) }

// Store keeps collections in maps, at most max bytes of them. A write that
// does not fit is refused whole with ports.ErrStorageFull; the store drops
// nothing to make room.
//
// Each collection has a lock of its own, and the store's lock guards only
// the list of collections: a long search or upsert in one collection holds
// up no call on another.
type Store struct {
	max       int64
	threshold int
	log       *slog.Logger
	// used is what the collections take, all of them: a write claims its
	// room with a compare-and-swap, so that the bound holds across
	// collections without a lock over them.
	used atomic.Int64

	mu          sync.RWMutex
	collections map[string]*collection

	// hooks are points where tests stop a call; nil outside tests.
	hooks struct {
		// staged is called by an upsert whose batch the index has
		// taken, not yet seen by searches, holding its collection's
		// write but not its lock.
		staged func(collection string)
		// stored is called by an upsert that has stored its batch,
		// with its collection's lock still held.
		stored func(collection string)
		// deleting is called by a delete of a collection that has
		// found it, before it waits for the collection's writes.
		deleting func(collection string)
	}
}

type collection struct {
	dimension int
	metric    ports.Metric
	index     *vecindex.Index

	// write is held by one write at a time, upsert or delete, for all
	// of it; mu only while it changes what searches read. So an upsert
	// puts its batch into the index, most of its time, while searches go
	// on, and the index takes the writes in the order the map does.
	write sync.Mutex
	mu    sync.RWMutex
	// dropped is set, under write and mu, by the delete that took the
	// collection off the store's list: a call that found it before then
	// finds it again, or finds it gone.
	dropped bool
	// vectors changes under write and mu.
	vectors map[string]stored
}

// stored is a vector and what it counts against the bound.
type stored struct {
	ports.Vector
	cost int64
}

var _ ports.VectorStore = (*Store)(nil)

// Open returns an empty store.
func Open(_ context.Context, c Config) (*Store, error) {
	if err := c.Check("vector_store.config"); err != nil {
		return nil, err
	}
	c.Default("")
	return &Store{max: c.MaxBytes, threshold: c.IndexThreshold, log: c.Logger, collections: map[string]*collection{}}, nil
}

// collectionCost is what a collection counts against the bound, its
// vectors aside.
func collectionCost(name string) int64 { return int64(len(name)) + CollectionOverhead }

// claim counts a write that takes need bytes and frees freed, unless the
// store has no room for it, which it refuses; what names the write.
func (s *Store) claim(what string, need, freed int64) error {
	for {
		used := s.used.Load()
		if used-freed+need > s.max {
			return fmt.Errorf("%s: %d bytes (with the upkeep of each vector, payload and collection) do not fit: the store holds %d of its max_bytes, %d: %w",
				what, need, used, s.max, ports.ErrStorageFull)
		}
		if s.used.CompareAndSwap(used, used-freed+need) {
			return nil
		}
	}
}

// Close stops the indexes' graph builders; the data stays until the store
// is garbage.
func (s *Store) Close() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, c := range s.collections {
		c.index.Close()
	}
	return nil
}

// lookup finds a collection, taking the store's lock only to read the
// list.
func (s *Store) lookup(name string) (*collection, error) {
	s.mu.RLock()
	c, ok := s.collections[name]
	s.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("collection %q: %w", name, ports.ErrNotFound)
	}
	return c, nil
}

// read finds a collection and holds its lock for reading until done is
// called.
func (s *Store) read(name string) (c *collection, done func(), err error) {
	for {
		if c, err = s.lookup(name); err != nil {
			return nil, nil, err
		}
		c.mu.RLock()
		if !c.dropped {
			return c, c.mu.RUnlock, nil
		}
		// Deleted since it was found, and maybe made again.
		c.mu.RUnlock()
	}
}

func (s *Store) CreateCollection(_ context.Context, name string, dimension int, metric ports.Metric) error {
	if err := vecutil.CheckCollection(name, dimension, metric); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.collections[name]; ok {
		if c.dimension != dimension || c.metric != metric {
			return fmt.Errorf("collection %q exists with dimension %d and metric %s, not %d and %s: %w",
				name, c.dimension, c.metric, dimension, metric, ports.ErrConflict)
		}
		return nil
	}
	if err := s.claim(fmt.Sprintf("create collection %q", name), collectionCost(name), 0); err != nil {
		return err
	}
	s.collections[name] = &collection{dimension: dimension, metric: metric, vectors: map[string]stored{},
		index: vecindex.New(dimension, metric, vecindex.Options{Threshold: s.threshold, Logger: s.log})}
	return nil
}

// DeleteCollection waits for the collection's write in progress, holding
// no lock of the store's meanwhile, and then frees what the collection
// held and takes it off the list in one hold of the store's lock: a call
// that finds the name gone finds its room free too.
func (s *Store) DeleteCollection(_ context.Context, name string) error {
	for {
		c, err := s.lookup(name)
		if err != nil {
			return err
		}
		if s.hooks.deleting != nil {
			s.hooks.deleting(name)
		}
		c.write.Lock()
		c.mu.Lock()
		if c.dropped {
			// Deleted by another call while this one waited, and
			// maybe made again.
			c.mu.Unlock()
			c.write.Unlock()
			continue
		}
		c.dropped = true
		freed := collectionCost(name)
		for _, v := range c.vectors {
			freed += v.cost
		}
		c.vectors = nil
		s.mu.Lock()
		s.used.Add(-freed)
		delete(s.collections, name)
		s.mu.Unlock()
		c.mu.Unlock()
		c.write.Unlock()
		c.index.Close()
		return nil
	}
}

func (s *Store) Collections(context.Context) ([]ports.VectorCollection, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]ports.VectorCollection, 0, len(s.collections))
	for name, c := range s.collections {
		out = append(out, ports.VectorCollection{Name: name, Dimension: c.dimension, Metric: c.metric, Indexed: c.index.Indexed()})
	}
	slices.SortFunc(out, func(a, b ports.VectorCollection) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Upsert checks the batch and copies it, normalising its payloads, outside
// any lock, and takes its collection's write to store what it made: a
// large batch does not hold up the calls on the collection while it is
// checked, nor while the index takes it.
func (s *Store) Upsert(_ context.Context, name string, vectors []ports.Vector) error {
	for {
		c, err := s.lookup(name)
		if err != nil {
			return err
		}
		u, err := prepare(name, c.dimension, vectors)
		if err != nil {
			return err
		}
		c.write.Lock()
		if c.dropped {
			// The collection was deleted, and maybe made again with
			// another dimension, while the batch was checked.
			c.write.Unlock()
			continue
		}
		err = s.store(name, c, u)
		c.write.Unlock()
		return err
	}
}

// upsert is a batch checked and copied for a collection, with what it
// takes: each id's cost, the last of an id given twice.
type upsert struct {
	vectors []stored
	entries []vecindex.Entry
	need    int64
	last    map[string]int64
}

// prepare checks vectors for a collection of dimension and copies them,
// their payloads normalised. It takes no lock.
func prepare(name string, dimension int, vectors []ports.Vector) (upsert, error) {
	if err := vecutil.CheckVectors(name, dimension, vectors); err != nil {
		return upsert{}, err
	}
	u := upsert{vectors: make([]stored, len(vectors)), entries: make([]vecindex.Entry, len(vectors)), last: make(map[string]int64, len(vectors))}
	for i, v := range vectors {
		p, err := vecutil.NormalizePayload(v.Payload)
		if err != nil {
			return upsert{}, fmt.Errorf("upsert %q into %q: %w", v.ID, name, err)
		}
		cost := int64(len(v.ID)+8*len(v.Values)) + EntryOverhead
		if p != nil {
			b, _ := json.Marshal(p) // a normalised payload always marshals
			cost += 2*int64(len(b)) + payloadUpkeep(p)
		}
		u.vectors[i] = stored{Vector: ports.Vector{ID: v.ID, Values: slices.Clone(v.Values), Payload: p}, cost: cost}
		u.entries[i] = vecindex.Entry{ID: v.ID, Values: u.vectors[i].Values, Payload: p}
		u.last[v.ID] = cost
	}
	for _, cost := range u.last {
		u.need += cost
	}
	return u, nil
}

// payloadUpkeep is what a decoded payload value counts besides its JSON
// text: PayloadObjectOverhead for each object, PayloadFieldOverhead for
// each field and PayloadElementOverhead for each element of an array.
func payloadUpkeep(v any) int64 {
	switch x := v.(type) {
	case map[string]any:
		n := int64(PayloadObjectOverhead)
		for _, f := range x {
			n += PayloadFieldOverhead + payloadUpkeep(f)
		}
		return n
	case []any:
		var n int64
		for _, e := range x {
			n += PayloadElementOverhead + payloadUpkeep(e)
		}
		return n
	}
	return 0
}

// store puts a prepared batch into c, the collection name, whole or not at
// all: what it takes is counted as the vectors it leaves. c.write is held;
// store takes c.mu only to make the batch seen, in the map and the index
// at once.
//
// A batch as large as the collection or larger is put into a new map, a
// copy of the collection's, before c.mu is taken, and the new map replaces
// the old under it: the hold is then a swap, not an insert of every vector
// (a copy costs no more than the batch's own inserts). A smaller batch
// goes into the map in place, under c.mu, for no longer than the copy
// would have taken.
func (s *Store) store(name string, c *collection, u upsert) error {
	var freed int64
	for id := range u.last {
		if old, ok := c.vectors[id]; ok {
			freed += old.cost
		}
	}
	if u.need > s.max {
		return fmt.Errorf("upsert into %q: a batch of %d bytes (ids, values twice, payloads twice and the upkeep of each vector and payload) is more than the store's max_bytes, %d: %w",
			name, u.need, s.max, ports.ErrTooLarge)
	}
	if err := s.claim(fmt.Sprintf("upsert into %q", name), u.need, freed); err != nil {
		return err
	}
	staged := c.index.Stage(u.entries)
	var next map[string]stored
	if len(u.vectors) >= len(c.vectors) {
		// Without c.mu: only a holder of c.write changes c.vectors.
		next = make(map[string]stored, len(c.vectors)+len(u.last))
		maps.Copy(next, c.vectors)
		for _, v := range u.vectors {
			next[v.ID] = v
		}
	}
	if s.hooks.staged != nil {
		s.hooks.staged(name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if next != nil {
		c.vectors = next
	} else {
		for _, v := range u.vectors {
			c.vectors[v.ID] = v
		}
	}
	staged.Publish()
	if s.hooks.stored != nil {
		s.hooks.stored(name)
	}
	return nil
}

func (s *Store) Search(_ context.Context, name string, query []float32, k int, filter map[string]any) ([]ports.ScoredVector, error) {
	f, err := vecutil.NewFilter(filter)
	if err != nil {
		return nil, fmt.Errorf("search %q: %w", name, err)
	}
	c, done, err := s.read(name)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := vecutil.CheckSearch(name, c.dimension, query, k); err != nil {
		return nil, err
	}
	cands := c.index.Search(query, k, f)
	out := vecindex.Finish(c.metric, query, k, cands, f, func(id string) (ports.Vector, bool) {
		v, ok := c.vectors[id]
		return v.Vector, ok
	})
	for i := range out {
		out[i].Vector = clone(out[i].Vector)
	}
	return out, nil
}

func (s *Store) Get(_ context.Context, name, id string) (ports.Vector, error) {
	if err := vecutil.CheckID(name, id); err != nil {
		return ports.Vector{}, err
	}
	c, done, err := s.read(name)
	if err != nil {
		return ports.Vector{}, err
	}
	defer done()
	v, ok := c.vectors[id]
	if !ok {
		return ports.Vector{}, fmt.Errorf("vector %q in %q: %w", id, name, ports.ErrNotFound)
	}
	return clone(v.Vector), nil
}

func (s *Store) Delete(_ context.Context, name string, ids []string) error {
	if err := vecutil.CheckIDs(name, ids); err != nil {
		return err
	}
	for {
		c, err := s.lookup(name)
		if err != nil {
			return err
		}
		c.write.Lock()
		if c.dropped {
			c.write.Unlock()
			continue
		}
		c.mu.Lock()
		var freed int64
		for _, id := range ids {
			if v, ok := c.vectors[id]; ok {
				freed += v.cost
				delete(c.vectors, id)
			}
		}
		s.used.Add(-freed)
		c.index.Remove(ids)
		c.mu.Unlock()
		c.write.Unlock()
		return nil
	}
}

func (s *Store) Count(_ context.Context, name string) (int, error) {
	c, done, err := s.read(name)
	if err != nil {
		return 0, err
	}
	defer done()
	return len(c.vectors), nil
}

// clone copies a stored vector so callers cannot change the store through
// what they were handed; payloads are copied deeply through JSON.
func clone(v ports.Vector) ports.Vector {
	p, _ := vecutil.NormalizePayload(v.Payload) // stored payloads are valid JSON already
	return ports.Vector{ID: v.ID, Values: slices.Clone(v.Values), Payload: p}
}
