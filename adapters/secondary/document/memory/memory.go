// Package memory is a document store inside one process: the reference for
// the document contract.
package memory

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"

	"github.com/abi-engine/engine/internal/docjson"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

var _ ports.DocumentStore = (*Store)(nil)

// Config is the adapter's block under services.document.config: it has no
// settings.
type Config struct{}

// LocalStorage implements ports.StorageConfig: the data lives in this process.
func (Config) LocalStorage() string { return ports.InThisProcess }

// stored is a document as canonical JSON: every read decodes a fresh copy,
// so callers never share maps with the store or each other.
type stored struct {
	version uint64
	raw     []byte
}

// Store keeps collections of documents in maps.
type Store struct {
	mu          sync.Mutex
	collections map[string]map[string]stored
	// versioned is the last version given to any document. Each write takes
	// the next, so a document deleted or dropped and made again starts
	// above every version it had.
	versioned uint64
}

// New returns an empty store.
func New() *Store { return &Store{collections: map[string]map[string]stored{}} }

// Open returns an empty store; it exists so the memory adapter has the shape
// of every other.
func Open(ctx context.Context, _ Config) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return New(), nil
}

// Close drops the data.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.collections = map[string]map[string]stored{}
	return nil
}

// collection returns the named collection. s.mu is held.
func (s *Store) collection(name string) (map[string]stored, error) {
	c, ok := s.collections[name]
	if !ok {
		return nil, fmt.Errorf("collection %q: %w", name, ports.ErrNotFound)
	}
	return c, nil
}

func check(ctx context.Context, collection string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return storecheck.Collection(collection)
}

func checkDoc(ctx context.Context, collection, id string) error {
	if err := check(ctx, collection); err != nil {
		return err
	}
	return storecheck.Key("id", id)
}

func (d stored) document(id string) (ports.Document, error) {
	data, err := docjson.Decode(d.raw)
	if err != nil {
		return ports.Document{}, fmt.Errorf("document %q: %w", id, err)
	}
	return ports.Document{ID: id, Version: d.version, Data: data}, nil
}

// EnsureCollection creates the collection if it is missing.
func (s *Store) EnsureCollection(ctx context.Context, name string) error {
	if err := check(ctx, name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.collections[name]; !ok {
		s.collections[name] = map[string]stored{}
	}
	return nil
}

// DropCollection removes the collection and its documents.
func (s *Store) DropCollection(ctx context.Context, name string) error {
	if err := check(ctx, name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.collection(name); err != nil {
		return fmt.Errorf("drop: %w", err)
	}
	delete(s.collections, name)
	return nil
}

// Collections lists the collections by name.
func (s *Store) Collections(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.collections)), nil
}

// Put writes the document if cond holds.
func (s *Store) Put(ctx context.Context, collection, id string, data map[string]any, cond ports.Cond) (ports.Document, error) {
	if err := checkDoc(ctx, collection, id); err != nil {
		return ports.Document{}, err
	}
	raw, canonical, err := docjson.Data(id, data)
	if err != nil {
		return ports.Document{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.collection(collection)
	if err != nil {
		return ports.Document{}, fmt.Errorf("put %q: %w", id, err)
	}
	cur := c[id] // version 0 when missing
	if want, ok := cond.Version(); ok && want != cur.version {
		return ports.Document{}, fmt.Errorf("put %q in %q at version %d, stored %d: %w", id, collection, want, cur.version, ports.ErrConflict)
	}
	s.versioned++
	next := stored{version: s.versioned, raw: raw}
	c[id] = next
	return ports.Document{ID: id, Version: next.version, Data: canonical}, nil
}

// Get returns the document.
func (s *Store) Get(ctx context.Context, collection, id string) (ports.Document, error) {
	if err := checkDoc(ctx, collection, id); err != nil {
		return ports.Document{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.collection(collection)
	if err != nil {
		return ports.Document{}, fmt.Errorf("get %q: %w", id, err)
	}
	d, ok := c[id]
	if !ok {
		return ports.Document{}, fmt.Errorf("get %q in %q: %w", id, collection, ports.ErrNotFound)
	}
	return d.document(id)
}

// Delete removes the document if cond holds.
func (s *Store) Delete(ctx context.Context, collection, id string, cond ports.Cond) error {
	if err := checkDoc(ctx, collection, id); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.collection(collection)
	if err != nil {
		return fmt.Errorf("delete %q: %w", id, err)
	}
	d, ok := c[id]
	if !ok {
		return fmt.Errorf("delete %q in %q: %w", id, collection, ports.ErrNotFound)
	}
	if want, ok := cond.Version(); ok && want != d.version {
		return fmt.Errorf("delete %q in %q at version %d, stored %d: %w", id, collection, want, d.version, ports.ErrConflict)
	}
	delete(c, id)
	return nil
}

type match struct {
	key docjson.Key
	doc ports.Document
}

// matching decodes every document of the collection that passes where.
// s.mu is held.
func (s *Store) matching(collection string, where []docjson.Where, orderBy string) ([]match, error) {
	c, err := s.collection(collection)
	if err != nil {
		return nil, err
	}
	var out []match
	for id, st := range c {
		d, err := st.document(id)
		if err != nil {
			return nil, err
		}
		if !matches(d.Data, where) {
			continue
		}
		var k docjson.Key
		if orderBy == "" {
			k = docjson.Key{ID: id}
		} else {
			v, ok := d.Data[orderBy]
			k = docjson.KeyOf(id, v, ok)
		}
		out = append(out, match{key: k, doc: d})
	}
	return out, nil
}

// matches compares canonical values, so 1 and 1.0 are equal and a missing
// field equals nothing, not even null.
func matches(data map[string]any, where []docjson.Where) bool {
	for _, w := range where {
		v, ok := data[w.Field]
		if !ok || !reflect.DeepEqual(v, w.Value) {
			return false
		}
	}
	return true
}

// Find sorts every match on each call: the store is meant for tests and
// small data.
func (s *Store) Find(ctx context.Context, collection string, q ports.Query) ([]ports.Document, string, error) {
	if err := check(ctx, collection); err != nil {
		return nil, "", err
	}
	where, limit, err := docjson.Check(q)
	if err != nil {
		return nil, "", err
	}
	after, hasCursor, err := docjson.DecodeCursor(q)
	if err != nil {
		return nil, "", err
	}
	s.mu.Lock()
	all, err := s.matching(collection, where, q.OrderBy)
	s.mu.Unlock()
	if err != nil {
		return nil, "", fmt.Errorf("find: %w", err)
	}
	order := func(a, b docjson.Key) int {
		if q.Desc {
			return docjson.Compare(b, a)
		}
		return docjson.Compare(a, b)
	}
	slices.SortFunc(all, func(a, b match) int { return order(a.key, b.key) })
	if hasCursor {
		i, _ := slices.BinarySearchFunc(all, after, func(m match, k docjson.Key) int { return order(m.key, k) })
		for i < len(all) && order(all[i].key, after) <= 0 {
			i++
		}
		all = all[i:]
	}
	next := ""
	if len(all) > limit {
		all = all[:limit]
		next = docjson.EncodeCursor(q, all[limit-1].key)
	}
	docs := make([]ports.Document, len(all))
	for i, m := range all {
		docs[i] = m.doc
	}
	return docs, next, nil
}

// Count counts the documents matching where.
func (s *Store) Count(ctx context.Context, collection string, where map[string]any) (int, error) {
	if err := check(ctx, collection); err != nil {
		return 0, err
	}
	conds, err := docjson.Conditions(where)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	all, err := s.matching(collection, conds, "")
	if err != nil {
		return 0, fmt.Errorf("count: %w", err)
	}
	return len(all), nil
}
