// Package objectstorage is a cache tier over the object storage service:
// each entry is an object under a prefix in any ports.ObjectStorage, named
// by the hash of its key, holding its expiry before its value. The tier is
// as shared as that store.
//
// The expiry is a wall-clock time, since engines on other hosts read it:
// hosts whose clocks differ see entries expire that much apart.
//
// Expired objects stay until their key is written again: the tier has no
// sweep (it is no ports.Expirer), and an entry written once and never
// again stays in the object store for good. No sweep can remove them
// safely through ports.ObjectStorage, whose Delete removes whatever the
// key holds when it runs. Between a sweep's read of an expired entry and
// its Delete, a Set may store a new entry under the key, on this engine
// or on the other one of a handover, and the Delete would remove that
// entry, a write its caller was told had succeeded. Replacing the expired
// entry first, with a Put conditioned on its ETag, only moves that race to
// the Delete of the replacement; a lock in the engine would keep its own
// calls from racing its sweep, but not the other engine's. A Delete
// conditioned on the ETag the sweep read would make a sweep safe (S3 has
// one, If-Match on DeleteObject, which the S3 adapter sends inside its
// own Delete); the port has none.
//
// Any caller of the object storage service can write under the prefix. An
// object there that is no entry of the tier's, shorter than an expiry or
// larger than any entry, is absent to the cache as an expired entry is:
// Get and Exists do not find it, Delete leaves it and reports nothing
// deleted, and Set and SetIfAbsent store over it.
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
	"strings"
	"time"

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
}

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

// Store is a cache kept in an object store.
type Store struct {
	objects ports.ObjectStorage
	prefix  string
	most    int // the largest value kept, MaxValue
}

var _ ports.Cache = (*Store)(nil)

// Open checks the config and returns the tier over objects, which stays
// open when the tier closes: it belongs to the object storage service.
func Open(ctx context.Context, c Config, objects ports.ObjectStorage) (*Store, error) {
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
	return &Store{objects: objects, prefix: prefix, most: MaxValue}, nil
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
