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
	"slices"
	"strings"
	"sync"

	"github.com/abi-engine/engine/adapters/secondary/internal/maxbytes"
	"github.com/abi-engine/engine/adapters/secondary/vectorstore/internal/vecindex"
	"github.com/abi-engine/engine/adapters/secondary/vectorstore/internal/vecutil"
	"github.com/abi-engine/engine/ports"
)

// DefaultMaxBytes is the bound of a store whose configuration sets none:
// about 80,000 vectors of dimension 384, past DefaultThreshold, where a
// collection gets its graph.
const DefaultMaxBytes = 256 << 20

// EntryOverhead is what a vector or a collection counts against the bound
// besides its id, values and payload, or its name: about what the maps and
// the index hold for it, so that a flood of small ones is bounded too.
const EntryOverhead = 128

// Config is the block under services.vector_store.config.
type Config struct {
	// MaxBytes bounds what the store holds: each vector counts its id, its
	// values twice (the stored copy and the index's), its payload as JSON
	// and EntryOverhead, each collection its name and EntryOverhead. 0 is
	// DefaultMaxBytes.
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

// Store keeps collections in maps behind one lock, at most max bytes of
// them. A write that does not fit is refused whole with
// ports.ErrStorageFull; the store drops nothing to make room.
type Store struct {
	max         int64
	mu          sync.RWMutex
	threshold   int
	log         *slog.Logger
	collections map[string]*collection
	used        int64
}

type collection struct {
	dimension int
	metric    ports.Metric
	vectors   map[string]stored
	index     *vecindex.Index
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
func collectionCost(name string) int64 { return int64(len(name)) + EntryOverhead }

// room refuses a write that takes need bytes and frees freed, unless the
// store has room for it; what names the write. s.mu is held.
func (s *Store) room(what string, need, freed int64) error {
	if s.used-freed+need > s.max {
		return fmt.Errorf("%s: %d bytes (with %d of upkeep each) do not fit: the store holds %d of its max_bytes, %d: %w",
			what, need, EntryOverhead, s.used, s.max, ports.ErrStorageFull)
	}
	return nil
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

// lookup finds a collection; the caller holds the lock.
func (s *Store) lookup(name string) (*collection, error) {
	c, ok := s.collections[name]
	if !ok {
		return nil, fmt.Errorf("collection %q: %w", name, ports.ErrNotFound)
	}
	return c, nil
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
	need := collectionCost(name)
	if err := s.room(fmt.Sprintf("create collection %q", name), need, 0); err != nil {
		return err
	}
	s.collections[name] = &collection{dimension: dimension, metric: metric, vectors: map[string]stored{},
		index: vecindex.New(dimension, metric, vecindex.Options{Threshold: s.threshold, Logger: s.log})}
	s.used += need
	return nil
}

func (s *Store) DeleteCollection(_ context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.lookup(name)
	if err != nil {
		return err
	}
	c.index.Close()
	for _, v := range c.vectors {
		s.used -= v.cost
	}
	s.used -= collectionCost(name)
	delete(s.collections, name)
	return nil
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
// the lock, which it takes only to store what it made: a large batch does
// not hold up the calls on the store while it is checked.
func (s *Store) Upsert(_ context.Context, name string, vectors []ports.Vector) error {
	for {
		s.mu.RLock()
		c, err := s.lookup(name)
		s.mu.RUnlock()
		if err != nil {
			return err
		}
		u, err := prepare(name, c.dimension, vectors)
		if err != nil {
			return err
		}
		s.mu.Lock()
		if s.collections[name] != c {
			// The collection was deleted, and maybe made again with
			// another dimension, while the batch was checked.
			s.mu.Unlock()
			continue
		}
		err = s.store(name, c, u)
		s.mu.Unlock()
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
			cost += int64(len(b))
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

// store puts a prepared batch into c, the collection name, whole or not at
// all: what it takes is counted as the vectors it leaves. s.mu is held.
func (s *Store) store(name string, c *collection, u upsert) error {
	var freed int64
	for id := range u.last {
		if old, ok := c.vectors[id]; ok {
			freed += old.cost
		}
	}
	if u.need > s.max {
		return fmt.Errorf("upsert into %q: a batch of %d bytes (ids, values twice, payloads and %d of upkeep a vector) is more than the store's max_bytes, %d: %w",
			name, u.need, EntryOverhead, s.max, ports.ErrTooLarge)
	}
	if err := s.room(fmt.Sprintf("upsert into %q", name), u.need, freed); err != nil {
		return err
	}
	s.used += u.need - freed
	for _, v := range u.vectors {
		c.vectors[v.ID] = v
	}
	c.index.Put(u.entries)
	return nil
}

func (s *Store) Search(_ context.Context, name string, query []float32, k int, filter map[string]any) ([]ports.ScoredVector, error) {
	f, err := vecutil.NewFilter(filter)
	if err != nil {
		return nil, fmt.Errorf("search %q: %w", name, err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, err := s.lookup(name)
	if err != nil {
		return nil, err
	}
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
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, err := s.lookup(name)
	if err != nil {
		return ports.Vector{}, err
	}
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
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.lookup(name)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if v, ok := c.vectors[id]; ok {
			s.used -= v.cost
			delete(c.vectors, id)
		}
	}
	c.index.Remove(ids)
	return nil
}

func (s *Store) Count(_ context.Context, name string) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, err := s.lookup(name)
	if err != nil {
		return 0, err
	}
	return len(c.vectors), nil
}

// clone copies a stored vector so callers cannot change the store through
// what they were handed; payloads are copied deeply through JSON.
func clone(v ports.Vector) ports.Vector {
	p, _ := vecutil.NormalizePayload(v.Payload) // stored payloads are valid JSON already
	return ports.Vector{ID: v.ID, Values: slices.Clone(v.Values), Payload: p}
}
