package objectstorage_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/abi-engine/engine/adapters/secondary/cache/objectstorage"
	"github.com/abi-engine/engine/adapters/secondary/objectstorage/localfs"
	objmemory "github.com/abi-engine/engine/adapters/secondary/objectstorage/memory"
	objects3 "github.com/abi-engine/engine/adapters/secondary/objectstorage/s3"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/internal/testenv"
	"github.com/abi-engine/engine/ports"
)

func openTier(t *testing.T, c objectstorage.Config, objects ports.ObjectStorage) objectstorage.Tier {
	t.Helper()
	tier, err := objectstorage.Open(t.Context(), c, objects)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { tier.Close() })
	return tier
}

func openMemory(t *testing.T) *objmemory.Store {
	t.Helper()
	objects, err := objmemory.Open(t.Context(), objmemory.Config{})
	if err != nil {
		t.Fatalf("open the object store: %v", err)
	}
	t.Cleanup(func() { objects.Close() })
	return objects
}

func TestCacheContract(t *testing.T) {
	t.Run("object_storage", func(t *testing.T) {
		contracttests.RunCache(t, contracttests.HarnessFunc[ports.Cache](func(t *testing.T) func(*testing.T) ports.Cache {
			objects := openMemory(t)
			// Each handle is a tier of its own over the one store, as two
			// engines sharing an object storage service would be.
			return func(t *testing.T) ports.Cache { return openTier(t, objectstorage.Config{}, objects) }
		}))
	})
	// Over files, each handle also has an object store of its own on the
	// shared directory, so the races go through the file locks.
	t.Run("object_storage_on_localfs", func(t *testing.T) {
		contracttests.RunCache(t, contracttests.HarnessFunc[ports.Cache](func(t *testing.T) func(*testing.T) ports.Cache {
			dir := t.TempDir()
			return func(t *testing.T) ports.Cache {
				objects, err := localfs.Open(t.Context(), localfs.Config{Path: dir})
				if err != nil {
					t.Fatalf("open the object store: %v", err)
				}
				t.Cleanup(func() { objects.Close() })
				return openTier(t, objectstorage.Config{}, objects)
			}
		}))
	})
}

// The tier keeps to its prefix, so it never touches the store's other
// objects, whatever its keys look like.
func TestTierStaysUnderItsPrefix(t *testing.T) {
	objects := openMemory(t)
	if _, err := objects.Put(t.Context(), "other", strings.NewReader("theirs"), ports.PutObjectOptions{}); err != nil {
		t.Fatalf("Put: %v", err)
	}
	tier := openTier(t, objectstorage.Config{Prefix: "c/"}, objects)
	for _, key := range []string{"other", "../other", strings.Repeat("x", 1024)} {
		if err := tier.Set(t.Context(), key, []byte("cached"), 0); err != nil {
			t.Fatalf("tier Set %.20q: %v", key, err)
		}
	}
	infos, _, err := objects.List(t.Context(), "", 1000, "")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(infos) != 4 {
		t.Fatalf("the store holds %d objects, want other and three under c/", len(infos))
	}
	for _, info := range infos {
		if info.Key != "other" && !strings.HasPrefix(info.Key, "c/") {
			t.Fatalf("the tier wrote %q outside its prefix c/", info.Key)
		}
	}
}

func TestLocalStorageFollowsTheService(t *testing.T) {
	for _, c := range []struct {
		service ports.StorageConfig
		want    string
	}{
		{localfs.Config{Path: ".engine/objects"}, "object_storage tier on the object_storage service: files under .engine/objects"},
		{objmemory.Config{}, "object_storage tier on the object_storage service: this process"},
		{objects3.Config{Bucket: "engine"}, ""},
	} {
		if got := (objectstorage.Config{Service: c.service}).LocalStorage(); got != c.want {
			t.Errorf("over %#v: LocalStorage %q, want %q", c.service, got, c.want)
		}
	}
	if got := (objectstorage.Config{}).LocalStorage(); got == "" {
		t.Errorf("without the service's configuration, LocalStorage passes as shared")
	}
}

// A prefix that would make every object name one the store refuses is
// refused when the tier opens, where the operator reads it, and not later
// in every call as if the caller's key were at fault; what the store takes
// is taken. S3 refuses path-like names, which files and memory keep.
func TestAPrefixTheStoreRefusesIsRefusedAtOpen(t *testing.T) {
	if _, err := objectstorage.Open(t.Context(), objectstorage.Config{Prefix: strings.Repeat("p", 1000)}, openMemory(t)); !errors.Is(err, ports.ErrInvalidArgument) {
		t.Errorf("Open with a prefix of 1000 bytes: err %v, want ErrInvalidArgument", err)
	}
	s3 := openS3(t)
	for _, prefix := range []string{"/", "/cache/", "cache//", "../cache/", "a/./"} {
		if _, err := objectstorage.Open(t.Context(), objectstorage.Config{Prefix: prefix}, s3); !errors.Is(err, ports.ErrInvalidArgument) {
			t.Errorf("Open with prefix %q over S3: err %v, want ErrInvalidArgument", prefix, err)
		}
		tier := openTier(t, objectstorage.Config{Prefix: prefix}, openMemory(t))
		if err := tier.Set(t.Context(), "k", []byte("v"), 0); err != nil {
			t.Errorf("Set under prefix %q over memory, which keeps such names: %v", prefix, err)
		}
	}
	// A name segment past 255 bytes is another a server keeping files
	// refuses, and the probe finds it too.
	if _, err := objectstorage.Open(t.Context(), objectstorage.Config{Prefix: strings.Repeat("p", 960)}, s3); !errors.Is(err, ports.ErrInvalidArgument) {
		t.Errorf("Open with a segment of 1024 bytes over S3: err %v, want ErrInvalidArgument", err)
	}
	for _, prefix := range []string{"cache/", "a/b/", "flat", "x/y/z/"} {
		tier := openTier(t, objectstorage.Config{Prefix: prefix}, s3)
		if err := tier.Set(t.Context(), strings.Repeat("k", 1024), []byte("v"), 0); err != nil {
			t.Errorf("Set under prefix %.20q over S3: %v", prefix, err)
		}
	}
}

// openS3 opens an object store on a bucket of the test's own on the S3
// server the environment names, emptied and removed when the test ends.
func openS3(t *testing.T) *objects3.Store {
	t.Helper()
	c := objects3.Config{
		Endpoint:  testenv.Lookup(t, "ENGINE_TEST_S3_ENDPOINT", "S3 server", false),
		AccessKey: testenv.Lookup(t, "ENGINE_TEST_S3_ACCESS_KEY", "S3 access key", false),
		SecretKey: testenv.Lookup(t, "ENGINE_TEST_S3_SECRET_KEY", "S3 secret key", false),
		Region:    "us-east-1", PathStyle: true,
		Bucket: fmt.Sprintf("t-cache-prefix-%d", time.Now().UnixNano()),
	}
	client := s3.New(s3.Options{
		Region: c.Region, BaseEndpoint: aws.String(c.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(c.AccessKey, c.SecretKey, ""),
	})
	if _, err := client.CreateBucket(t.Context(), &s3.CreateBucketInput{Bucket: aws.String(c.Bucket)}); err != nil {
		t.Fatalf("create bucket %q: %v", c.Bucket, err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		list, err := client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(c.Bucket)})
		if err == nil {
			for _, o := range list.Contents {
				_, _ = client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(c.Bucket), Key: o.Key})
			}
		}
		if _, err := client.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(c.Bucket)}); err != nil {
			t.Errorf("delete bucket %q: %v", c.Bucket, err)
		}
	})
	store, err := objects3.Open(t.Context(), c)
	if err != nil {
		t.Fatalf("open S3: %v", err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}
