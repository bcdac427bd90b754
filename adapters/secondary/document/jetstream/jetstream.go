// Package jetstream is a document store in a JetStream key-value bucket,
// which every engine of a NATS account reaches and a cluster replicates.
//
// A collection is a marker key, c.<name>; its documents are keys
// d.<name>.<generation>.<id token>, where the generation is the marker's
// revision, so a collection dropped and made again never shows a document
// of its past life, even one written while it was being dropped. A
// document's version is its key's revision: a write conditioned on it is a
// compare-and-set the stream decides. Reads go to the stream's leader.
//
// The store is fenced: a write under a fencing token expects the bucket's
// fence at its term, and one of an older term than the newest the bucket
// has seen is refused with ports.ErrFenced and stores nothing (jsbucket's
// OpenFenced, ADR 0020). A call that may write raises the fence, or is
// refused, before it reads, so a call of a newer term that writes nothing
// (a Put into a collection not made, a conditional Put or Delete whose
// condition fails) fences the older terms all the same. The purges of a
// drop, of a making and of the sweeps take only documents no read reaches
// and are not fenced; nor is a scan's barrier, which is part of a read.
//
// Find and Count have no index: they read every document of the collection
// in batches and sort in memory. This adapter is for
// modest collections (thousands of documents, not millions).
package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/secondary/internal/jsbucket"
	"github.com/abi-engine/engine/internal/docjson"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

var _ ports.DocumentStore = (*Store)(nil)

// DefaultBucket is the bucket used when the configuration names none.
const DefaultBucket = "ABI_DOCS"

// Config is the adapter's block under services.document.config.
type Config struct {
	// Bucket is the key-value bucket; default ABI_DOCS.
	Bucket string `yaml:"bucket"`
	// Replicas is 1, 3 or 5 (default 1), applied when the bucket is made.
	Replicas int `yaml:"replicas"`
	// Logger hears what an operator must know of the bucket, such as
	// markers of expiry the engine's user may not turn off; nil means
	// slog.Default().
	Logger *slog.Logger `yaml:"-"`
}

// LocalStorage implements ports.StorageConfig: the bucket is on the NATS
// servers every engine of the account reaches.
func (Config) LocalStorage() string { return "" }

// Default fills the bucket's name and replica count.
func (c *Config) Default(string) {
	if c.Bucket == "" {
		c.Bucket = DefaultBucket
	}
	c.Replicas = max(c.Replicas, 1)
}

// SetLogger implements storage.LoggerSetter.
func (c *Config) SetLogger(log *slog.Logger) { c.Logger = log }

// Check refuses bad settings, naming the key under prefix.
func (c Config) Check(prefix string) error { return jsbucket.Config(c).Check(prefix) }

// Describe names the bucket and its replicas.
func (c Config) Describe() string { return jsbucket.Config(c).Describe() }

// Store is the bucket on a connection.
type Store struct {
	b  *jsbucket.Bucket
	nc *nats.Conn
	// closing ends at Close, and with it the sweeps, which close swept
	// when they have ended.
	closing context.Context
	close   context.CancelFunc
	swept   chan struct{}
}

// sweepEvery is the time between two sweeps of the documents of dropped
// generations; the first runs at Open.
const sweepEvery = time.Hour

// Open opens the bucket on nc, creating it when it is missing. The store
// owns nc: Close closes it.
func Open(ctx context.Context, c Config, nc *nats.Conn) (*Store, error) {
	return open(ctx, c, nc, sweepEvery)
}

func open(ctx context.Context, c Config, nc *nats.Conn, every time.Duration) (*Store, error) {
	c.Default("")
	b, err := jsbucket.OpenFenced(ctx, nc, jsbucket.Config(c), "abi-engine documents")
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("document jetstream: %w", err)
	}
	closing, cancel := context.WithCancel(context.Background())
	s := &Store{b: b, nc: nc, closing: closing, close: cancel, swept: make(chan struct{})}
	// It sweeps at Open and then every every until Close.
	go jsbucket.Sweeps(s.closing, every, dropTimeout, s.sweep, s.swept)
	return s, nil
}

// Close stops the sweeps, waits (within dropTimeout) for the one under way
// to end, and closes the store's connection; closing twice is harmless.
func (s *Store) Close() error {
	s.close()
	select {
	case <-s.swept:
	case <-time.After(dropTimeout):
	}
	s.nc.Close()
	return nil
}

// sweep purges the documents of generations no read reaches: those of a
// collection whose marker is at another revision, or gone. A drop whose
// engine died before its purge, or whose purge failed, left them, and
// only a drop or a making of the collection would take them otherwise.
// A generation is a revision of the marker, and revisions only grow: one
// that the marker has left, read after the documents were listed, never
// comes back, and a collection made after the listing has none of its
// documents in it.
func (s *Store) sweep(ctx context.Context) error {
	tokens, err := s.b.Tokens(ctx, "d.>")
	if err != nil {
		return err
	}
	generations := map[string]map[uint64]bool{}
	for _, t := range tokens {
		parts := strings.SplitN(t, ".", 4)
		if len(parts) != 4 {
			continue
		}
		gen, err := strconv.ParseUint(parts[2], 10, 64)
		if err != nil {
			continue // not a key of this adapter's
		}
		if generations[parts[1]] == nil {
			generations[parts[1]] = map[uint64]bool{}
		}
		generations[parts[1]][gen] = true
	}
	for name, gens := range generations {
		e, err := s.b.Last(ctx, marker(name))
		if err != nil {
			return err
		}
		for gen := range gens {
			if e.Live && gen == e.Revision {
				continue
			}
			if err := s.b.Purge(ctx, fmt.Sprintf("d.%s.%d.>", name, gen)); err != nil {
				return err
			}
		}
	}
	return nil
}

// casRounds bounds how often a write re-reads after losing a race that did
// not decide its outcome.
const casRounds = 32

func marker(collection string) string { return "c." + collection }

func docToken(collection string, generation uint64, id string) string {
	return fmt.Sprintf("d.%s.%d.%s", collection, generation, jsbucket.Encode(id))
}

// generation is the collection's marker revision, or ErrNotFound.
func (s *Store) generation(ctx context.Context, collection string) (uint64, error) {
	e, err := s.b.Last(ctx, marker(collection))
	if err != nil {
		return 0, err
	}
	if !e.Live {
		return 0, fmt.Errorf("collection %q: %w", collection, ports.ErrNotFound)
	}
	return e.Revision, nil
}

// EnsureCollection writes the collection's marker unless it has one, and
// then purges the documents of the collection's earlier generations that
// a drop which never finished left.
func (s *Store) EnsureCollection(ctx context.Context, name string) error {
	if err := storecheck.Collection(name); err != nil {
		return err
	}
	if err := s.b.Fence(ctx); err != nil {
		return fmt.Errorf("ensure collection %q: %w", name, err)
	}
	for range casRounds {
		e, err := s.b.Last(ctx, marker(name))
		if err != nil {
			return fmt.Errorf("ensure collection %q: %w", name, err)
		}
		if e.Live {
			return nil
		}
		rev := e.Revision
		made, err := s.b.Put(ctx, marker(name), []byte("{}"), 0, &rev)
		if err == nil {
			// Documents below the new marker are of generations no read
			// reaches: a drop whose purge never ran left them. The purge
			// is housekeeping, the collection is made whatever becomes of
			// it, and a later drop or sweep takes what it leaves.
			_ = s.b.PurgeBelow(ctx, "d."+name+".>", made)
			return nil
		}
		if !errors.Is(err, jsbucket.ErrConflict) {
			return fmt.Errorf("ensure collection %q: %w", name, err)
		}
	}
	return fmt.Errorf("ensure collection %q: it changed %d times meanwhile: %w", name, casRounds, ports.ErrConflict)
}

// DropCollection deletes the marker, which hides the documents at once,
// then purges the collection's documents written before that delete: the
// generation it dropped, and any older one a drop before it left (its
// engine stopped, or its purge failed, before the purge went through). A
// collection made again has a marker, and so documents, at later
// revisions: a purge that lands late, after the collection was made again
// and written, leaves them alone. A caller that gives up while the
// marker's removal is on its way ends its sending: the drop then watches
// (within 5 s) whether the removal landed, and if so purges all the same
// (within 30 s).
func (s *Store) DropCollection(ctx context.Context, name string) error {
	if err := storecheck.Collection(name); err != nil {
		return err
	}
	if err := s.b.Fence(ctx); err != nil {
		return fmt.Errorf("drop collection %q: %w", name, err)
	}
	for range casRounds {
		e, err := s.b.Last(ctx, marker(name))
		if err != nil {
			return fmt.Errorf("drop collection %q: %w", name, err)
		}
		if !e.Live {
			return fmt.Errorf("drop collection %q: %w", name, ports.ErrNotFound)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("drop collection %q: %w", name, err)
		}
		err = s.drop(ctx, name, e.Revision)
		if errors.Is(err, jsbucket.ErrConflict) {
			continue
		}
		return wrap(err, "drop collection %q", name)
	}
	return fmt.Errorf("drop collection %q: it changed %d times meanwhile: %w", name, casRounds, ports.ErrConflict)
}

// dropTimeout bounds a drop's purge of the documents, which runs on after
// the caller gives up.
const dropTimeout = 30 * time.Second

// landWait bounds how long a drop whose caller gave up watches for its
// removal of the marker to land.
const landWait = 5 * time.Second

// drop removes the marker at rev, on the caller's context, and purges the
// documents written before that removal, on a context that outlives it:
// once the marker is gone only this call purges them. A removal refused
// for another revision (jsbucket.ErrConflict), known not done
// (ports.ErrNotDone), or refused by the fence (ports.ErrFenced) changed
// nothing: the drop fails with it, and does not take another caller's
// removal that landed meanwhile for its own.
//
// The removal is not sent again after the caller gave up. The engine's
// fence gives its calls up so that they write nothing beside a successor,
// and the bucket's fence refuses an older term's removal only once the
// successor has written: sent anew once the connection is back, the
// removal could land before that and drop the collection under the
// successor (and a removal without a token is never fenced). The removal
// may still have landed, so the drop watches the marker for it instead
// (landed).
func (s *Store) drop(ctx context.Context, name string, rev uint64) error {
	removed, err := s.b.Remove(ctx, marker(name), rev)
	if err != nil && ctx.Err() != nil && !errors.Is(err, jsbucket.ErrConflict) && !errors.Is(err, ports.ErrNotDone) && !errors.Is(err, ports.ErrFenced) {
		removed, err = s.landed(ctx, name, rev, err)
	}
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dropTimeout)
	defer cancel()
	return s.b.PurgeBelow(pctx, "d."+name+".>", removed)
}

// landed reads the marker, within landWait, until the message after rev is
// a removal, and returns its revision: the collection is gone, and purging
// below it takes only documents no read reaches. Otherwise the drop failed
// with cause: the marker is still at rev, or a write came after the
// removal (the collection made again, whose making purges what the drop
// left).
func (s *Store) landed(ctx context.Context, name string, rev uint64, cause error) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), landWait)
	defer cancel()
	for {
		e, err := s.b.Last(ctx, marker(name))
		if err == nil && e.Revision > rev {
			if e.Live {
				return 0, cause
			}
			return e.Revision, nil
		}
		select {
		case <-ctx.Done():
			return 0, cause
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// Collections lists the collections whose marker is live.
func (s *Store) Collections(ctx context.Context) ([]string, error) {
	out := []string{}
	err := s.b.Scan(ctx, "c.*", func(token string, e jsbucket.Entry) error {
		if e.Live {
			out = append(out, strings.TrimPrefix(token, "c."))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list collections: %w", err)
	}
	slices.Sort(out)
	return out, nil
}

// Put writes the document if cond holds: conditioned on the revision read,
// so of racing writers at one version exactly one succeeds.
func (s *Store) Put(ctx context.Context, collection, id string, data map[string]any, cond ports.Cond) (ports.Document, error) {
	if err := checkDoc(collection, id); err != nil {
		return ports.Document{}, err
	}
	raw, canonical, err := docjson.Data(id, data)
	if err != nil {
		return ports.Document{}, err
	}
	if err := s.b.Fence(ctx); err != nil {
		return ports.Document{}, fmt.Errorf("put %q in %q: %w", id, collection, err)
	}
	gen, err := s.generation(ctx, collection)
	if err != nil {
		return ports.Document{}, fmt.Errorf("put %q: %w", id, err)
	}
	token := docToken(collection, gen, id)
	want, conditional := cond.Version()
	var expect *uint64
	if conditional {
		e, err := s.b.Last(ctx, token)
		if err != nil {
			return ports.Document{}, fmt.Errorf("put %q in %q: %w", id, collection, err)
		}
		stored := uint64(0)
		if e.Live {
			stored = e.Revision
		}
		if stored != want {
			return ports.Document{}, fmt.Errorf("put %q in %q at version %d, stored %d: %w", id, collection, want, stored, ports.ErrConflict)
		}
		expect = &e.Revision
	}
	rev, err := s.b.Put(ctx, token, raw, 0, expect)
	if errors.Is(err, jsbucket.ErrConflict) {
		return ports.Document{}, fmt.Errorf("put %q in %q at version %d: another write came first: %w", id, collection, want, ports.ErrConflict)
	}
	if err != nil {
		return ports.Document{}, fmt.Errorf("put %q in %q: %w", id, collection, err)
	}
	return ports.Document{ID: id, Version: rev, Data: canonical}, nil
}

// Get returns the document.
func (s *Store) Get(ctx context.Context, collection, id string) (ports.Document, error) {
	if err := checkDoc(collection, id); err != nil {
		return ports.Document{}, err
	}
	gen, err := s.generation(ctx, collection)
	if err != nil {
		return ports.Document{}, fmt.Errorf("get %q: %w", id, err)
	}
	e, err := s.b.Last(ctx, docToken(collection, gen, id))
	if err != nil {
		return ports.Document{}, fmt.Errorf("get %q in %q: %w", id, collection, err)
	}
	if !e.Live {
		return ports.Document{}, fmt.Errorf("get %q in %q: %w", id, collection, ports.ErrNotFound)
	}
	return document(id, e)
}

// Delete writes a deletion marker over the document if cond holds.
func (s *Store) Delete(ctx context.Context, collection, id string, cond ports.Cond) error {
	if err := checkDoc(collection, id); err != nil {
		return err
	}
	if err := s.b.Fence(ctx); err != nil {
		return fmt.Errorf("delete %q in %q: %w", id, collection, err)
	}
	gen, err := s.generation(ctx, collection)
	if err != nil {
		return fmt.Errorf("delete %q: %w", id, err)
	}
	token := docToken(collection, gen, id)
	want, conditional := cond.Version()
	for range casRounds {
		e, err := s.b.Last(ctx, token)
		if err != nil {
			return fmt.Errorf("delete %q in %q: %w", id, collection, err)
		}
		if !e.Live {
			return fmt.Errorf("delete %q in %q: %w", id, collection, ports.ErrNotFound)
		}
		if conditional && e.Revision != want {
			return fmt.Errorf("delete %q in %q at version %d, stored %d: %w", id, collection, want, e.Revision, ports.ErrConflict)
		}
		_, err = s.b.Remove(ctx, token, e.Revision)
		if err == nil {
			return nil
		}
		if !errors.Is(err, jsbucket.ErrConflict) {
			return fmt.Errorf("delete %q in %q: %w", id, collection, err)
		}
		// Another write came between the read and the delete: read again,
		// and a conditional delete then fails on the new version.
	}
	return fmt.Errorf("delete %q in %q: it changed %d times meanwhile: %w", id, collection, casRounds, ports.ErrConflict)
}

func checkDoc(collection, id string) error {
	if err := storecheck.Collection(collection); err != nil {
		return err
	}
	return storecheck.Key("id", id)
}

func document(id string, e jsbucket.Entry) (ports.Document, error) {
	data, err := docjson.Decode(e.Value)
	if err != nil {
		return ports.Document{}, fmt.Errorf("document %q: %w", id, err)
	}
	return ports.Document{ID: id, Version: e.Revision, Data: data}, nil
}

type match struct {
	key docjson.Key
	doc ports.Document
}

// scan reads every live document of the collection that passes where. A
// collection dropped while the scan ran is ErrNotFound: the drop removes
// the marker before it purges the documents, so a scan that finds the
// marker as it was at the start read its generation whole, and one that
// does not may have read it partly purged, or not at all.
func (s *Store) scan(ctx context.Context, collection string, where []docjson.Where, orderBy string) ([]match, error) {
	gen, err := s.generation(ctx, collection)
	if err != nil {
		return nil, err
	}
	prefix := fmt.Sprintf("d.%s.%d.", collection, gen)
	var out []match
	err = s.b.Scan(ctx, prefix+"*", func(token string, e jsbucket.Entry) error {
		if !e.Live {
			return nil
		}
		id, err := jsbucket.Decode(strings.TrimPrefix(token, prefix))
		if err != nil {
			return nil // a key another client wrote outside this adapter's encoding
		}
		d, err := document(id, e)
		if err != nil {
			return err
		}
		if !matches(d.Data, where) {
			return nil
		}
		k := docjson.Key{ID: id}
		if orderBy != "" {
			v, ok := d.Data[orderBy]
			k = docjson.KeyOf(id, v, ok)
		}
		out = append(out, match{key: k, doc: d})
		return nil
	})
	if err != nil {
		return nil, err
	}
	now, err := s.generation(ctx, collection)
	if err != nil {
		return nil, err
	}
	if now != gen {
		return nil, fmt.Errorf("collection %q, dropped while it was read: %w", collection, ports.ErrNotFound)
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

// Find reads the whole collection, sorts the matches and returns the page
// after the cursor.
func (s *Store) Find(ctx context.Context, collection string, q ports.Query) ([]ports.Document, string, error) {
	if err := storecheck.Collection(collection); err != nil {
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
	all, err := s.scan(ctx, collection, where, q.OrderBy)
	if err != nil {
		return nil, "", fmt.Errorf("find in %q: %w", collection, err)
	}
	order := func(a, b docjson.Key) int {
		if q.Desc {
			return docjson.Compare(b, a)
		}
		return docjson.Compare(a, b)
	}
	if hasCursor {
		all = slices.DeleteFunc(all, func(m match) bool { return order(m.key, after) <= 0 })
	}
	slices.SortFunc(all, func(a, b match) int { return order(a.key, b.key) })
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

// Count reads the whole collection and counts the matches.
func (s *Store) Count(ctx context.Context, collection string, where map[string]any) (int, error) {
	if err := storecheck.Collection(collection); err != nil {
		return 0, err
	}
	conds, err := docjson.Conditions(where)
	if err != nil {
		return 0, err
	}
	all, err := s.scan(ctx, collection, conds, "")
	if err != nil {
		return 0, fmt.Errorf("count in %q: %w", collection, err)
	}
	return len(all), nil
}

// wrap adds what failed to a non-nil error.
func wrap(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}
