package objectstorage_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/cache/objectstorage"
	objjetstream "github.com/abi-engine/engine/adapters/secondary/objectstorage/jetstream"
	"github.com/abi-engine/engine/adapters/secondary/objectstorage/localfs"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// everyStore runs test over each object store the tier may be opened on:
// memory, files, S3 and JetStream, each new for the subtest.
func everyStore(t *testing.T, test func(t *testing.T, objects ports.ObjectStorage)) {
	stores := []struct {
		name string
		open func(t *testing.T) ports.ObjectStorage
	}{
		{"memory", func(t *testing.T) ports.ObjectStorage { return openMemory(t) }},
		{"localfs", func(t *testing.T) ports.ObjectStorage {
			objects, err := localfs.Open(t.Context(), localfs.Config{Path: t.TempDir()})
			if err != nil {
				t.Fatalf("open the object store: %v", err)
			}
			t.Cleanup(func() { objects.Close() })
			return objects
		}},
		{"s3", func(t *testing.T) ports.ObjectStorage { return openS3(t) }},
		{"jetstream", func(t *testing.T) ports.ObjectStorage {
			url := natstest.StartServer(t).ClientURL()
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			objects, err := objjetstream.Open(ctx, objjetstream.Config{Bucket: "CACHE_TIER"}, natstest.Connect(t, url))
			if err != nil {
				t.Fatalf("open the object store: %v", err)
			}
			t.Cleanup(func() { objects.Close() })
			return objects
		}},
	}
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) { test(t, s.open(t)) })
	}
}

// objectOf names the object the tier keeps key's entry in under the
// default prefix.
func objectOf(key string) string {
	sum := sha256.Sum256([]byte(key))
	return objectstorage.DefaultPrefix + hex.EncodeToString(sum[:])
}

// readCounter counts the bytes the tier reads from the objects it gets.
type readCounter struct {
	ports.ObjectStorage
	read atomic.Int64
}

func (c *readCounter) Get(ctx context.Context, key string, opts ports.GetObjectOptions) (io.ReadCloser, ports.ObjectInfo, error) {
	r, info, err := c.ObjectStorage.Get(ctx, key, opts)
	if err != nil {
		return nil, info, err
	}
	return countedReader{r, c}, info, nil
}

type countedReader struct {
	io.ReadCloser
	c *readCounter
}

func (r countedReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.c.read.Add(int64(n))
	return n, err
}
