package s3_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	objects3 "github.com/abi-engine/engine/adapters/secondary/objectstorage/s3"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/internal/testenv"
	"github.com/abi-engine/engine/ports"
)

// server reads the S3 server's address and keys from the environment.
func server(t *testing.T) objects3.Config {
	t.Helper()
	return objects3.Config{
		Endpoint:  testenv.Lookup(t, "ENGINE_TEST_S3_ENDPOINT", "S3 server", false),
		AccessKey: testenv.Lookup(t, "ENGINE_TEST_S3_ACCESS_KEY", "S3 access key", false),
		SecretKey: testenv.Lookup(t, "ENGINE_TEST_S3_SECRET_KEY", "S3 secret key", false),
		Region:    "us-east-1",
		PathStyle: true,
	}
}

func admin(c objects3.Config) *s3.Client {
	return s3.New(s3.Options{
		Region:       c.Region,
		BaseEndpoint: aws.String(c.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(c.AccessKey, c.SecretKey, ""),
	})
}

var notBucketChars = regexp.MustCompile(`[^a-z0-9]+`)

// bucketName derives a valid S3 bucket name from the test, with a random
// suffix so that runs sharing a server never meet.
func bucketName(t *testing.T) string {
	parts := strings.Split(t.Name(), "/")
	name := strings.Trim(notBucketChars.ReplaceAllString(strings.ToLower(parts[len(parts)-1]), "-"), "-")
	suffix := make([]byte, 4)
	rand.Read(suffix)
	return "t-" + name[:min(len(name), 40)] + "-" + hex.EncodeToString(suffix)
}

// newBucket creates a bucket for the test and empties and removes it after.
func newBucket(t *testing.T, c objects3.Config) string {
	t.Helper()
	client, bucket := admin(c), bucketName(t)
	if _, err := client.CreateBucket(t.Context(), &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatalf("create bucket %q: %v", bucket, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		pages := s3.NewListObjectsV2Paginator(client, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
		for pages.HasMorePages() {
			page, err := pages.NextPage(ctx)
			if err != nil {
				t.Errorf("list bucket %q: %v", bucket, err)
				return
			}
			for _, o := range page.Contents {
				if _, err := client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: o.Key}); err != nil {
					t.Errorf("empty bucket %q: %v", bucket, err)
				}
			}
		}
		if _, err := client.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(bucket)}); err != nil {
			t.Errorf("delete bucket %q: %v", bucket, err)
		}
	})
	return bucket
}

func open(t *testing.T, c objects3.Config) *objects3.Store {
	t.Helper()
	store, err := objects3.Open(t.Context(), c)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

func TestObjectStorageContract(t *testing.T) {
	t.Run("s3", func(t *testing.T) {
		c := server(t)
		contracttests.RunObjectStorage(t, contracttests.HarnessFunc[ports.ObjectStorage](func(t *testing.T) func(*testing.T) ports.ObjectStorage {
			c := c
			c.Bucket = newBucket(t, c)
			// Each handle has a client and connections of its own.
			return func(t *testing.T) ports.ObjectStorage { return open(t, c) }
			// versitygw keeps objects as files, so "a" and "a/b" cannot
			// coexist; the adapter itself refuses path-like keys. Nor is
			// it linearizable: a Get may pair one version's ETag with
			// another's content, and two Deletes racing on one object
			// both succeed (ObjectStorageCapabilities.Linearizable).
		}), contracttests.ObjectStorageCapabilities{ConditionalPut: true})
	})
}

func TestOpen(t *testing.T) {
	c := server(t)
	if got := c.LocalStorage(); got != "" {
		t.Fatalf("LocalStorage is %q, want \"\": every engine reaches the bucket", got)
	}
	if _, err := objects3.Open(t.Context(), objects3.Config{Endpoint: c.Endpoint}); !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), "bucket") {
		t.Fatalf("Open without a bucket: err %v, want ErrInvalidArgument naming bucket", err)
	}
	c.Bucket = bucketName(t)
	if _, err := objects3.Open(t.Context(), c); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Open of a missing bucket: err %v, want ErrNotFound", err)
	}
}
