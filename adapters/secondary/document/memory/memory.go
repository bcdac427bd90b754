// Package memory is a document store inside one process, bounded in bytes:
// the reference for the document contract.
package memory

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"

	"github.com/abi-engine/engine/adapters/secondary/internal/maxbytes"
	"github.com/abi-engine/engine/internal/docjson"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

var _ ports.DocumentStore = (*Store)(nil)

// DefaultMaxBytes is the bound of a store whose configuration sets none.
const DefaultMaxBytes = 64 << 20

// EntryOverhead is what a document counts against the bound besides its
// id and its JSON text, and CollectionOverhead what a collection counts
// besides its name, the shard its first document comes with included: no
// less than what the store holds on the heap for them
// (TestTheBoundCountsNoLessThanTheHeapTheStoreHolds), so that a flood of
// empty documents or of collections is bounded too.
const (
	EntryOverhead      = 128
	CollectionOverhead = 640
)

// Config is the adapter's block under services.document.config.
type Config struct {
	// MaxBytes bounds what the store holds: each document counts its id,
	// its JSON text and EntryOverhead, each collection its name and
	// CollectionOverhead. 0 is DefaultMaxBytes.
	MaxBytes int64 `yaml:"max_bytes"`
}

// LocalStorage implements ports.StorageConfig: the data lives in this process.
func (Config) LocalStorage() string { return ports.InThisProcess }

// Default fills in the bound a block left out, so that the resolved
// configuration shows the one the store keeps.
func (c *Config) Default(string) { c.MaxBytes = maxbytes.Default(c.MaxBytes, DefaultMaxBytes) }

// Check refuses a negative bound, naming it under key.
func (c Config) Check(key string) error { return maxbytes.Check(key, c.MaxBytes, DefaultMaxBytes) }

// stored is a document as canonical JSON: every read decodes a fresh copy,
// so callers never share maps with the store or each other.
type stored struct {
	version uint64
	raw     []byte
}

// Store keeps collections of documents in maps, at most max bytes of
// them. A write that does not fit is refused with ports.ErrStorageFull; the
// store drops nothing to make room. A collection's documents are in shards
// (docs), which a find takes as they stand without copying the documents.
type Store struct {
	max int64

	mu          sync.Mutex
	collections map[string]*docs
	used        int64
	// versioned is the last version given to any document. Each write takes
	// the next, so a document deleted or dropped and made again starts
	// above every version it had.
	versioned uint64

	// hooks are points where tests stop the store; nil outside tests.
	hooks struct {
		match  func() // a find or count is about to match the documents it read
		decode func() // a get is about to decode the document it read
	}
}

// New returns an empty store of DefaultMaxBytes.
func New() *Store { return &Store{max: DefaultMaxBytes, collections: map[string]*docs{}} }

// Open returns an empty store.
func Open(ctx context.Context, c Config) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := c.Check("document.config"); err != nil {
		return nil, err
	}
	c.Default("")
	s := New()
	s.max = c.MaxBytes
	return s, nil
}

// Close drops the data.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.collections = map[string]*docs{}
	s.used = 0
	return nil
}

// docCost is what a document counts against the bound.
func docCost(id string, raw []byte) int64 { return int64(len(id)+len(raw)) + EntryOverhead }

// collectionCost is what a collection counts against the bound, its
// documents aside.
func collectionCost(name string) int64 { return int64(len(name)) + CollectionOverhead }

// room reports whether the store has room for a write that takes need
// bytes and frees freed. s.mu is held.
func (s *Store) room(need, freed int64) bool { return s.used-freed+need <= s.max }

// full refuses a write of need bytes for which the store has no room; what
// names the write. It is formatted only then: a write that fits, nearly
// every one, formats nothing under the store's lock. s.mu is held.
func (s *Store) full(what string, need int64) error {
	return fmt.Errorf("%s: %d bytes (with the upkeep of the document or collection) do not fit: the store holds %d of its max_bytes, %d: %w",
		what, need, s.used, s.max, ports.ErrStorageFull)
}

// collection returns the named collection. s.mu is held.
func (s *Store) collection(name string) (*docs, error) {
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
	if _, ok := s.collections[name]; ok {
		return nil
	}
	need := collectionCost(name)
	if !s.room(need, 0) {
		return s.full(fmt.Sprintf("create collection %q", name), need)
	}
	s.collections[name] = newDocs()
	s.used += need
	return nil
}

// DropCollection removes the collection and its documents.
func (s *Store) DropCollection(ctx context.Context, name string) error {
	if err := check(ctx, name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.collection(name)
	if err != nil {
		return fmt.Errorf("drop: %w", err)
	}
	s.used -= c.bytes + collectionCost(name)
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
	need := docCost(id, raw)
	if need > s.max {
		return ports.Document{}, fmt.Errorf("put %q in %q: a document of %d bytes (its id, its JSON and %d of upkeep) is more than the store's max_bytes, %d: %w",
			id, collection, need, EntryOverhead, s.max, ports.ErrTooLarge)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.collection(collection)
	if err != nil {
		return ports.Document{}, fmt.Errorf("put %q: %w", id, err)
	}
	cur, had := c.get(id) // version 0 when missing
	if want, ok := cond.Version(); ok && want != cur.version {
		return ports.Document{}, fmt.Errorf("put %q in %q at version %d, stored %d: %w", id, collection, want, cur.version, ports.ErrConflict)
	}
	var freed int64
	if had {
		freed = docCost(id, cur.raw)
	}
	if !s.room(need, freed) {
		return ports.Document{}, s.full(fmt.Sprintf("put %q in %q", id, collection), need)
	}
	s.used += need - freed
	s.versioned++
	next := stored{version: s.versioned, raw: raw}
	c.put(id, next)
	return ports.Document{ID: id, Version: next.version, Data: canonical}, nil
}

// Get returns the document.
func (s *Store) Get(ctx context.Context, collection, id string) (ports.Document, error) {
	if err := checkDoc(ctx, collection, id); err != nil {
		return ports.Document{}, err
	}
	s.mu.Lock()
	c, err := s.collection(collection)
	if err != nil {
		s.mu.Unlock()
		return ports.Document{}, fmt.Errorf("get %q: %w", id, err)
	}
	d, ok := c.get(id)
	s.mu.Unlock()
	if !ok {
		return ports.Document{}, fmt.Errorf("get %q in %q: %w", id, collection, ports.ErrNotFound)
	}
	// A stored text is never changed, only replaced, so it is decoded
	// outside the lock: a get of a large document holds up no other call.
	if s.hooks.decode != nil {
		s.hooks.decode()
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
	d, ok := c.get(id)
	if !ok {
		return fmt.Errorf("delete %q in %q: %w", id, collection, ports.ErrNotFound)
	}
	if want, ok := cond.Version(); ok && want != d.version {
		return fmt.Errorf("delete %q in %q at version %d, stored %d: %w", id, collection, want, d.version, ports.ErrConflict)
	}
	c.remove(id)
	s.used -= docCost(id, d.raw)
	return nil
}

type match struct {
	key docjson.Key
	doc ports.Document
}

// matching decodes every document of the collection that passes where. It
// takes the lock only to take the collection's shards as they stand
// (docs.snapshot), which writes copy before they change them, and reads
// and decodes them outside it, so calls on other documents go on
// meanwhile; it answers as the collection stood when it took them.
func (s *Store) matching(collection string, where []docjson.Where, orderBy string) ([]match, error) {
	s.mu.Lock()
	c, err := s.collection(collection)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	shards := c.snapshot()
	s.mu.Unlock()
	if s.hooks.match != nil {
		s.hooks.match()
	}
	var out []match
	for _, sh := range shards {
		for id, st := range sh {
			m, ok, err := matchOne(id, st, where, orderBy)
			if err != nil {
				return nil, err
			}
			if ok {
				out = append(out, m)
			}
		}
	}
	return out, nil
}

// matchOne decodes the document st under id and reports whether it passes
// where, with its place in the order by orderBy.
func matchOne(id string, st stored, where []docjson.Where, orderBy string) (match, bool, error) {
	d, err := st.document(id)
	if err != nil || !matches(d.Data, where) {
		return match{}, false, err
	}
	if orderBy == "" {
		return match{key: docjson.Key{ID: id}, doc: d}, true, nil
	}
	v, ok := d.Data[orderBy]
	return match{key: docjson.KeyOf(id, v, ok), doc: d}, true, nil
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
	all, err := s.matching(collection, where, q.OrderBy)
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
	all, err := s.matching(collection, conds, "")
	if err != nil {
		return 0, fmt.Errorf("count: %w", err)
	}
	return len(all), nil
}
