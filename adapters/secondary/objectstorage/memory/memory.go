// Package memory is an object store in this process. Objects are kept in
// chunks, so a Put never copies an object into one growing buffer.
package memory

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/objectstorage/internal/objkey"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

// chunkSize is the most a chunk holds; small objects get small chunks.
const chunkSize = 1 << 20

// Config is the memory adapter's configuration: it has no settings.
type Config struct{}

// LocalStorage implements ports.StorageConfig: the objects live in this
// process only.
func (Config) LocalStorage() string { return ports.InThisProcess }

// Store keeps objects in memory. It is safe for concurrent use.
type Store struct {
	mu      sync.Mutex
	objects map[string]*object
}

// object is immutable once stored; a Put replaces it whole.
type object struct {
	info   ports.ObjectInfo
	chunks [][]byte
}

var _ ports.ObjectStorage = (*Store)(nil)

// Open returns an empty store.
func Open(_ context.Context, _ Config) (*Store, error) {
	return &Store{objects: make(map[string]*object)}, nil
}

// Close releases nothing: the objects go with the store.
func (s *Store) Close() error { return nil }

// Put implements ports.ObjectStorage.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, opts ports.PutObjectOptions) (ports.ObjectInfo, error) {
	if err := objkey.CheckPut(key, opts); err != nil {
		return ports.ObjectInfo{}, err
	}
	sum := sha256.New()
	var chunks [][]byte
	var size int64
	for {
		if err := ctx.Err(); err != nil {
			return ports.ObjectInfo{}, fmt.Errorf("put %q: %w", key, err)
		}
		chunk, err := readChunk(r)
		if len(chunk) > 0 {
			chunks = append(chunks, chunk)
			sum.Write(chunk)
			size += int64(len(chunk))
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return ports.ObjectInfo{}, fmt.Errorf("put %q: read: %w", key, err)
		}
	}
	contentType := opts.ContentType
	if contentType == "" {
		contentType = objkey.DefaultContentType
	}
	obj := &object{
		info: ports.ObjectInfo{
			Key:         key,
			Size:        size,
			ETag:        hex.EncodeToString(sum.Sum(nil)),
			ContentType: contentType,
			Modified:    time.Now().UTC(),
		},
		chunks: chunks,
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// A caller that gave up while the last bytes were read is told the Put
	// failed, so it must not land: checked under the lock, just before it
	// would, as the other stores do.
	if err := ctx.Err(); err != nil {
		return ports.ObjectInfo{}, fmt.Errorf("put %q: %w", key, err)
	}
	old, exists := s.objects[key]
	if opts.IfAbsent && exists {
		return ports.ObjectInfo{}, fmt.Errorf("put %q if absent: the object exists: %w", key, ports.ErrConflict)
	}
	if opts.IfMatch != "" && (!exists || old.info.ETag != opts.IfMatch) {
		return ports.ObjectInfo{}, fmt.Errorf("put %q if ETag is %q: %w", key, opts.IfMatch, ports.ErrConflict)
	}
	s.objects[key] = obj
	return obj.info, nil
}

// readChunk reads up to chunkSize bytes, growing its buffer as data comes,
// so a small object takes little memory. It returns io.EOF at the end.
func readChunk(r io.Reader) ([]byte, error) {
	b := make([]byte, 0, 512)
	for len(b) < chunkSize {
		if len(b) == cap(b) {
			b = slices.Grow(b, min(cap(b), chunkSize-len(b)))
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			return b, err
		}
	}
	return b, nil
}

func (s *Store) lookup(key string) (*object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	obj, ok := s.objects[key]
	if !ok {
		return nil, fmt.Errorf("object %q: %w", key, ports.ErrNotFound)
	}
	return obj, nil
}

// Get implements ports.ObjectStorage.
func (s *Store) Get(_ context.Context, key string, opts ports.GetObjectOptions) (io.ReadCloser, ports.ObjectInfo, error) {
	if err := objkey.CheckGet(key, opts); err != nil {
		return nil, ports.ObjectInfo{}, err
	}
	obj, err := s.lookup(key)
	if err != nil {
		return nil, ports.ObjectInfo{}, err
	}
	offset, length, err := objkey.Span(key, opts, obj.info.Size)
	if err != nil {
		return nil, ports.ObjectInfo{}, err
	}
	readers := make([]io.Reader, 0, len(obj.chunks))
	for _, c := range obj.chunks {
		readers = append(readers, bytes.NewReader(c))
	}
	r := io.MultiReader(readers...)
	if _, err := io.CopyN(io.Discard, r, offset); err != nil {
		return nil, ports.ObjectInfo{}, fmt.Errorf("get %q: skip to %d: %w", key, offset, err)
	}
	return io.NopCloser(io.LimitReader(r, length)), obj.info, nil
}

// Stat implements ports.ObjectStorage.
func (s *Store) Stat(_ context.Context, key string) (ports.ObjectInfo, error) {
	if err := objkey.Check(key); err != nil {
		return ports.ObjectInfo{}, err
	}
	obj, err := s.lookup(key)
	if err != nil {
		return ports.ObjectInfo{}, err
	}
	return obj.info, nil
}

// Delete implements ports.ObjectStorage.
func (s *Store) Delete(_ context.Context, key string) error {
	if err := objkey.Check(key); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.objects[key]; !ok {
		return fmt.Errorf("delete %q: %w", key, ports.ErrNotFound)
	}
	delete(s.objects, key)
	return nil
}

var _ ports.ConditionalObjectDeleter = (*Store)(nil)

// DeleteIfMatch implements ports.ConditionalObjectDeleter: it compares and
// removes under the lock every Put takes to store an object.
func (s *Store) DeleteIfMatch(_ context.Context, key, etag string) (bool, error) {
	if err := objkey.CheckDeleteIfMatch(key, etag); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if obj, ok := s.objects[key]; !ok || obj.info.ETag != etag {
		return false, nil
	}
	delete(s.objects, key)
	return true, nil
}

// List implements ports.ObjectStorage. The cursor is the last key of the
// previous page.
func (s *Store) List(_ context.Context, prefix string, limit int, cursor string) ([]ports.ObjectInfo, string, error) {
	limit, err := storecheck.Limit("limit", limit)
	if err != nil {
		return nil, "", err
	}
	if err := objkey.CheckList(prefix, cursor); err != nil {
		return nil, "", err
	}
	s.mu.Lock()
	var infos []ports.ObjectInfo
	for key, obj := range s.objects {
		if strings.HasPrefix(key, prefix) && key > cursor {
			infos = append(infos, obj.info)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(infos, func(a, b ports.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	if len(infos) <= limit {
		return infos, "", nil
	}
	return infos[:limit], infos[limit-1].Key, nil
}
