// Package memory is a vector store held in this process. Search is exact
// up to a collection of Config.IndexThreshold vectors and goes through an
// HNSW graph above it (package vecindex). It is for tests and
// single-process development: its data goes with the process.
package memory

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/abi-engine/engine/adapters/secondary/vectorstore/internal/vecindex"
	"github.com/abi-engine/engine/adapters/secondary/vectorstore/internal/vecutil"
	"github.com/abi-engine/engine/ports"
)

// Config is the block under services.vector_store.config.
type Config struct {
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

// Store keeps collections in maps behind one lock.
type Store struct {
	mu          sync.RWMutex
	threshold   int
	log         *slog.Logger
	collections map[string]*collection
}

type collection struct {
	dimension int
	metric    ports.Metric
	vectors   map[string]ports.Vector
	index     *vecindex.Index
}

var _ ports.VectorStore = (*Store)(nil)

// Open returns an empty store.
func Open(_ context.Context, c Config) (*Store, error) {
	return &Store{threshold: c.IndexThreshold, log: c.Logger, collections: map[string]*collection{}}, nil
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
	s.collections[name] = &collection{dimension: dimension, metric: metric, vectors: map[string]ports.Vector{},
		index: vecindex.New(dimension, metric, vecindex.Options{Threshold: s.threshold, Logger: s.log})}
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

func (s *Store) Upsert(_ context.Context, name string, vectors []ports.Vector) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.lookup(name)
	if err != nil {
		return err
	}
	if err := vecutil.CheckVectors(name, c.dimension, vectors); err != nil {
		return err
	}
	stored := make([]ports.Vector, len(vectors))
	entries := make([]vecindex.Entry, len(vectors))
	for i, v := range vectors {
		p, err := vecutil.NormalizePayload(v.Payload)
		if err != nil {
			return fmt.Errorf("upsert %q into %q: %w", v.ID, name, err)
		}
		stored[i] = ports.Vector{ID: v.ID, Values: slices.Clone(v.Values), Payload: p}
		entries[i] = vecindex.Entry{ID: v.ID, Values: stored[i].Values, Payload: p}
	}
	for _, v := range stored {
		c.vectors[v.ID] = v
	}
	c.index.Put(entries)
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
		return v, ok
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
	return clone(v), nil
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
		delete(c.vectors, id)
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
