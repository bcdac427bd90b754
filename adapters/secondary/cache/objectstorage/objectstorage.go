// Package objectstorage is a cache tier over the object storage service:
// each entry is an object under a prefix in any ports.ObjectStorage, named
// by the hash of its key, holding its expiry before its value. The tier is
// as shared as that store.
//
// The expiry is a wall-clock time, since engines on other hosts read it:
// hosts whose clocks differ see entries expire that much apart.
//
// An expired entry stays until its key is written again, or until the
// engine's sweep removes it, and the tier sweeps only over an object store
// that can delete on condition (ports.ConditionalObjectDeleter): Open then
// returns a SweptStore, a ports.Expirer, and otherwise a Store, which is
// none. ports.ObjectStorage's Delete removes whatever the key holds when
// it runs: between a sweep's read of an expired entry and its Delete, a
// Set may store a new entry under the key, on this engine or on the other
// one of a handover, and the Delete would remove that entry, a write its
// caller was told had succeeded. A lock in the engine would keep its own
// calls from racing its sweep, but not the other engine's. The sweep
// deletes an entry only if its ETag is still the one it read, which the
// store checks in the same step as it removes it, so an entry written
// since stays. The memory, localfs and JetStream object stores can; the S3
// one cannot (its server, versitygw, checks and removes in two steps), and
// over it expired entries stay in the object store for good, which Open
// logs as a warning, since nothing else would tell the operator before
// the bucket fills.
//
// Any caller of the object storage service can write under the prefix. An
// object there that is no entry of the tier's, shorter than an expiry or
// larger than any entry, is absent to the cache as an expired entry is:
// Get and Exists do not find it, Delete leaves it and reports nothing
// deleted, and Set and SetIfAbsent store over it. The sweep leaves such
// an object alone, and any object under the prefix whose name is not one
// the tier makes.
package objectstorage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/abi-engine/engine/internal/expiry"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

// DefaultPrefix keeps cache objects apart from the store's other objects.
const DefaultPrefix = "cache/"

// headerSize is the stored expiry: Unix nanoseconds, 0 for none.
const headerSize = 8

// MaxValue is the largest value the tier keeps: no call to the engine
// carries more (its largest uploaded request). An object under the prefix
// may be larger, since any caller of the object storage service can write
// there; it is no entry of the tier's, and is known by its size, unread.
const MaxValue = 256 << 20

// Config is the object storage tier's block under services.cache.config.
type Config struct {
	// Prefix goes before every object name; DefaultPrefix when empty.
	Prefix string `yaml:"prefix"`
	// Service is the object storage service's configuration, set by the
	// configuration layer: the tier keeps its data where that service does.
	Service ports.StorageConfig `yaml:"-"`
	// Logger hears, at Open, that the tier cannot sweep over the object
	// store it is given; nil means slog.Default().
	Logger *slog.Logger `yaml:"-"`
}

// SetLogger implements storage.LoggerSetter.
func (c *Config) SetLogger(log *slog.Logger) { c.Logger = log }

// LocalStorage implements ports.StorageConfig: the tier is local exactly
// when the object storage service is. Without the service's configuration
// it cannot tell, and says so rather than pass as shared.
func (c Config) LocalStorage() string {
	if c.Service == nil {
		return "object_storage tier on the object_storage service, whose storage is not configured"
	}
	where := c.Service.LocalStorage()
	if where == "" {
		return ""
	}
	return "object_storage tier on the object_storage service: " + where
}

// Tier is what Open returns: a *SweptStore over an object store that can
// delete on condition, a *Store over any other.
type Tier interface {
	ports.Cache
	io.Closer
}

// Store is a cache kept in an object store. It has no sweep.
type Store struct {
	objects ports.ObjectStorage
	prefix  string
	most    int // the largest value kept, MaxValue
}

var _ ports.Cache = (*Store)(nil)

// Open checks the config and returns the tier over objects, which stays
// open when the tier closes: it belongs to the object storage service.
// Over an object store that cannot delete on condition it warns, on the
// config's logger, that expired entries will stay there, and what the
// operator can do about it.
func Open(ctx context.Context, c Config, objects ports.ObjectStorage) (Tier, error) {
	if objects == nil {
		return nil, fmt.Errorf("cache object_storage tier: no object store: %w", ports.ErrInvalidArgument)
	}
	prefix := c.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if err := checkPrefix(ctx, objects, prefix); err != nil {
		return nil, err
	}
	s := &Store{objects: objects, prefix: prefix, most: MaxValue}
	if deleter, ok := objects.(ports.ConditionalObjectDeleter); ok {
		return &SweptStore{Store: s, deleter: deleter, pages: sweepPages}, nil
	}
	log := c.Logger
	if log == nil {
		log = slog.Default()
	}
	log.WarnContext(ctx, "cache object_storage tier: the object store cannot delete an object on condition of its version, so the tier has no sweep and an expired entry no call writes again stays in the store for good; "+
		"to reclaim the space, delete the objects under the prefix while no engine serves (which empties the cache), or keep the cache on another tier or over an object store that can sweep (memory, localfs, jetstream)",
		"store", fmt.Sprintf("%T", objects), "prefix", prefix)
	return s, nil
}

// checkPrefix refuses a prefix that would make every object name one the
// store refuses: too long to leave room for the hash, or one it refuses
// for its own reasons (an S3 server, "/" or ".." segments), which a Stat
// of a name under the prefix shows. Refused here, the operator reads it at
// start; let through, every call would fail as if its caller's key were
// at fault. Any other answer of the Stat is left to the calls.
func checkPrefix(ctx context.Context, objects ports.ObjectStorage, prefix string) error {
	if err := storecheck.Key("cache.config.prefix", prefix); err != nil {
		return err
	}
	if most := storecheck.MaxKey - hex.EncodedLen(sha256.Size); len(prefix) > most {
		return fmt.Errorf("cache.config.prefix is %d bytes, more than the %d that leave room for a key's hash: %w", len(prefix), most, ports.ErrInvalidArgument)
	}
	probe := prefix + strings.Repeat("0", hex.EncodedLen(sha256.Size))
	if _, err := objects.Stat(ctx, probe); errors.Is(err, ports.ErrInvalidArgument) {
		return fmt.Errorf("cache.config.prefix %q makes names the object store refuses: %w", prefix, err)
	}
	return nil
}

// Close leaves the object store open.
func (s *Store) Close() error { return nil }

// objectKey names key's object by its hash, which fits any object store's
// key rules whatever the cache key holds ("../x", 1 KiB).
func (s *Store) objectKey(key string) (string, error) {
	if err := storecheck.Key("cache key", key); err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(key))
	return s.prefix + hex.EncodeToString(sum[:]), nil
}

// entry is a stored value and when it expires (zero: never).
type entry struct {
	value   []byte
	expires time.Time
	// not says why the object read is no entry ("" for an entry): such an
	// object is never live.
	not string
}

func (e entry) live() bool {
	return e.not == "" && (e.expires.IsZero() || time.Now().Before(e.expires))
}

// checkValue refuses a value larger than the tier reads back.
func (s *Store) checkValue(value []byte) error {
	if len(value) > s.most {
		return fmt.Errorf("cache value of %d bytes is larger than %d: %w", len(value), s.most, ports.ErrInvalidArgument)
	}
	return nil
}

func encode(value []byte, ttl time.Duration) io.Reader {
	var h [headerSize]byte
	if ttl > 0 {
		binary.BigEndian.PutUint64(h[:], uint64(time.Now().Add(ttl).UnixNano()))
	}
	return io.MultiReader(bytes.NewReader(h[:]), bytes.NewReader(bytes.Clone(value)))
}

// read returns the entry stored under an object key and the object's
// ETag. Without value it reads the entry's expiry alone, the object's
// first bytes, which is all that Exists, Delete and SetIfAbsent decide on:
// the value after it may be as large as MaxValue. An object that is no
// entry is returned as one that says why, with its ETag, so that
// SetIfAbsent can store over it.
func (s *Store) read(ctx context.Context, okey string, value bool) (entry, string, error) {
	opts := ports.GetObjectOptions{}
	if !value {
		opts.Length = headerSize
	}
	r, info, err := s.objects.Get(ctx, okey, opts)
	if err != nil {
		return entry{}, "", err
	}
	defer r.Close()
	if info.Size > int64(headerSize+s.most) {
		return entry{not: fmt.Sprintf("%d bytes, more than any entry", info.Size)}, info.ETag, nil
	}
	limit := int64(headerSize)
	if value {
		limit += int64(s.most) + 1 // a byte more shows an object longer than it said
	}
	b, err := io.ReadAll(io.LimitReader(r, limit))
	if err != nil {
		return entry{}, "", fmt.Errorf("read %q: %w", okey, err)
	}
	if len(b) > headerSize+s.most {
		return entry{not: "longer than its size said, and than any entry"}, info.ETag, nil
	}
	if len(b) < headerSize {
		return entry{not: fmt.Sprintf("%d bytes, no expiry", len(b))}, info.ETag, nil
	}
	e := entry{value: b[headerSize:]}
	if ns := binary.BigEndian.Uint64(b[:headerSize]); ns != 0 {
		e.expires = time.Unix(0, int64(ns))
	}
	return e, info.ETag, nil
}

// lookup returns key's live entry, or ErrNotFound, with its value when
// value is set.
func (s *Store) lookup(ctx context.Context, key string, value bool) (entry, string, error) {
	okey, err := s.objectKey(key)
	if err != nil {
		return entry{}, "", err
	}
	e, _, err := s.read(ctx, okey, value)
	if err != nil {
		return entry{}, "", fmt.Errorf("cache %q: %w", key, err)
	}
	if e.not != "" {
		return entry{}, okey, fmt.Errorf("cache %q: object %q is no entry (%s): %w", key, okey, e.not, ports.ErrNotFound)
	}
	if !e.live() {
		return entry{}, okey, fmt.Errorf("cache %q expired at %v: %w", key, e.expires, ports.ErrNotFound)
	}
	return e, okey, nil
}

// Get implements ports.Cache.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	e, _, err := s.lookup(ctx, key, true)
	if err != nil {
		return nil, err
	}
	return e.value, nil
}

// Set implements ports.Cache.
func (s *Store) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	okey, err := s.objectKey(key)
	if err != nil {
		return err
	}
	if err := storecheck.TTL(ttl); err != nil {
		return err
	}
	if err := s.checkValue(value); err != nil {
		return err
	}
	if _, err := s.objects.Put(ctx, okey, encode(value, ttl), ports.PutObjectOptions{}); err != nil {
		return fmt.Errorf("cache set %q: %w", key, err)
	}
	return nil
}

// SetIfAbsent implements ports.Cache. A missing object is created only if
// still absent; an expired one, or one that is no entry, is replaced only
// if its ETag is unchanged.
// A racer that loses either write reads again and decides anew.
func (s *Store) SetIfAbsent(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error) {
	okey, err := s.objectKey(key)
	if err != nil {
		return false, err
	}
	if err := storecheck.TTL(ttl); err != nil {
		return false, err
	}
	if err := s.checkValue(value); err != nil {
		return false, err
	}
	for {
		_, err := s.objects.Put(ctx, okey, encode(value, ttl), ports.PutObjectOptions{IfAbsent: true})
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, ports.ErrConflict) {
			return false, fmt.Errorf("cache set %q if absent: %w", key, err)
		}
		cur, etag, err := s.read(ctx, okey, false)
		if errors.Is(err, ports.ErrNotFound) {
			continue // deleted since: try to create it again
		}
		if err != nil {
			return false, fmt.Errorf("cache set %q if absent: %w", key, err)
		}
		if cur.live() {
			return false, nil
		}
		_, err = s.objects.Put(ctx, okey, encode(value, ttl), ports.PutObjectOptions{IfMatch: etag})
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, ports.ErrConflict) {
			return false, fmt.Errorf("cache set %q if absent: %w", key, err)
		}
		if err := ctx.Err(); err != nil {
			return false, fmt.Errorf("cache set %q if absent: %w", key, err)
		}
	}
}

// Delete implements ports.Cache. An expired entry, or an object that is no
// entry, counts as missing and is left in place, since deleting it could
// remove a new entry written since.
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	_, okey, err := s.lookup(ctx, key, false)
	if errors.Is(err, ports.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	err = s.objects.Delete(ctx, okey)
	if errors.Is(err, ports.ErrNotFound) {
		return false, nil // another caller deleted it first
	}
	if err != nil {
		return false, fmt.Errorf("cache delete %q: %w", key, err)
	}
	return true, nil
}

// Exists implements ports.Cache.
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	_, _, err := s.lookup(ctx, key, false)
	if errors.Is(err, ports.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// sweepPages is how many pages of the tier's listing, expiry.Batch
// objects each, one sweep looks at; the next sweep goes on from there. A
// sweep's work is so bounded however many entries the cache holds: a
// listing and a read of each object's first bytes cost a call to the
// store each.
const sweepPages = 16

// SweptStore is the tier over an object store that can delete an object
// on condition of its ETag: a Store whose expired entries the engine's
// sweep removes (ports.Expirer).
type SweptStore struct {
	*Store
	deleter ports.ConditionalObjectDeleter
	pages   int
	// mu makes sweeps take turns, and guards cursor: where the next
	// sweep's listing starts, "" at the first object.
	mu     sync.Mutex
	cursor string
}

var _ ports.Expirer = (*SweptStore)(nil)

// DeleteExpired implements ports.Expirer. It lists the tier's objects a
// page at a time, reads the expiry of each object named as an entry (its
// first bytes, never the value), and deletes an expired one only if its
// ETag is still the one the read returned: an entry written since, by
// this engine or another, stays. A sweep looks at sweepPages pages at most
// and the next one goes on after them. An object it cannot read is left
// for the next pass, and the first such error is returned once the sweep
// has looked at the rest.
func (s *SweptStore) DeleteExpired(ctx context.Context) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	deleted := 0
	var failed error
	for range s.pages {
		infos, next, err := s.objects.List(ctx, s.prefix, expiry.Batch, s.cursor)
		if err != nil {
			return deleted, errors.Join(failed, fmt.Errorf("cache sweep: list %q after %q: %w", s.prefix, s.cursor, err))
		}
		for _, info := range infos {
			if err := ctx.Err(); err != nil {
				return deleted, errors.Join(failed, fmt.Errorf("cache sweep: %w", err))
			}
			ok, err := s.sweep(ctx, info.Key)
			if err != nil && failed == nil {
				failed = err
			}
			if ok {
				deleted++
			}
		}
		s.cursor = next
		if next == "" {
			break
		}
	}
	return deleted, failed
}

// sweep deletes the object okey if it holds an expired entry, and only
// while it holds the version read.
func (s *SweptStore) sweep(ctx context.Context, okey string) (bool, error) {
	if !s.entryName(okey) {
		return false, nil // another caller's object under the prefix
	}
	e, etag, err := s.read(ctx, okey, false)
	if errors.Is(err, ports.ErrNotFound) {
		return false, nil // deleted since it was listed
	}
	if err != nil {
		return false, fmt.Errorf("cache sweep: %w", err)
	}
	if e.not != "" || e.live() {
		return false, nil
	}
	ok, err := s.deleter.DeleteIfMatch(ctx, okey, etag)
	if err != nil {
		return false, fmt.Errorf("cache sweep: delete %q if the ETag is %q: %w", okey, etag, err)
	}
	return ok, nil
}

// entryName reports whether okey is a name objectKey makes: the prefix
// and 64 lowercase hex digits.
func (s *Store) entryName(okey string) bool {
	name, ok := strings.CutPrefix(okey, s.prefix)
	if !ok || len(name) != hex.EncodedLen(sha256.Size) {
		return false
	}
	for _, c := range []byte(name) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
