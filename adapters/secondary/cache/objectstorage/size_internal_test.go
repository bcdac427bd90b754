package objectstorage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"testing"

	objmemory "github.com/abi-engine/engine/adapters/secondary/objectstorage/memory"
	"github.com/abi-engine/engine/ports"
)

// Any caller of the object storage service can write under the tier's
// prefix, of any size. A cache get of such an object finds no entry there
// by its size rather than read it whole into the engine; a value larger
// than the tier reads back is refused when it is set. The bound is made small here
// so that the test stays small; the engine's is MaxValue.
func TestAnObjectLargerThanAnyEntryIsNotRead(t *testing.T) {
	objects, err := objmemory.Open(t.Context(), objmemory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer objects.Close()
	tier, err := Open(t.Context(), Config{}, objects)
	if err != nil {
		t.Fatal(err)
	}
	s := base(tier)
	s.most = 1 << 10
	sum := sha256.Sum256([]byte("k"))
	planted := make([]byte, headerSize+s.most+1) // a header of zeros: never expires
	if _, err := objects.Put(t.Context(), DefaultPrefix+hex.EncodeToString(sum[:]), bytes.NewReader(planted), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	reads := &countingStore{ObjectStorage: objects}
	s.objects = reads
	if v, err := s.Get(t.Context(), "k"); !errors.Is(err, ports.ErrNotFound) || reads.read > 0 {
		t.Fatalf("Get of an object of %d bytes = %d bytes, %v, after reading %d bytes; want ErrNotFound and nothing read", len(planted), len(v), err, reads.read)
	}
	if err := s.Set(t.Context(), "big", make([]byte, s.most+1), 0); !errors.Is(err, ports.ErrInvalidArgument) {
		t.Fatalf("Set of a value of %d bytes: err %v, want ErrInvalidArgument", s.most+1, err)
	}
	if _, err := s.SetIfAbsent(t.Context(), "big", make([]byte, s.most+1), 0); !errors.Is(err, ports.ErrInvalidArgument) {
		t.Fatalf("SetIfAbsent of a value of %d bytes: err %v, want ErrInvalidArgument", s.most+1, err)
	}
	if err := s.Set(t.Context(), "fits", make([]byte, s.most), 0); err != nil {
		t.Fatalf("Set of a value of %d bytes: %v", s.most, err)
	}
	if v, err := s.Get(t.Context(), "fits"); err != nil || len(v) != s.most {
		t.Fatalf("Get of the largest value = %d bytes, %v", len(v), err)
	}
}

// countingStore counts the bytes read from the objects it hands out.
type countingStore struct {
	ports.ObjectStorage
	read int
}

func (c *countingStore) Get(ctx context.Context, key string, opts ports.GetObjectOptions) (io.ReadCloser, ports.ObjectInfo, error) {
	r, info, err := c.ObjectStorage.Get(ctx, key, opts)
	if err != nil {
		return nil, info, err
	}
	return countingReader{r, c}, info, nil
}

type countingReader struct {
	io.ReadCloser
	c *countingStore
}

func (r countingReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.c.read += n
	return n, err
}
