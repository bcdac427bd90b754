package s3_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/abi-engine/engine/ports"
)

// A bucket removed under a serving engine is a store that is gone, not an
// object that is missing: a Put, a Get or a List fails as the engine's own
// error (500), naming the missing bucket, never as not found (404) or as a
// lost condition (409), which would send a caller to look for, or write
// again, an object it cannot reach. Before, every one of them was 404, and
// a Put if the ETag matched was 409. A Stat or a Delete is still 404: S3
// answers a HEAD, which has no body, alike for a missing bucket and a
// missing key.
func TestAMissingBucketIsNoMissingObject(t *testing.T) {
	c := server(t)
	c.Bucket = bucketName(t)
	if _, err := admin(c).CreateBucket(t.Context(), &s3.CreateBucketInput{Bucket: aws.String(c.Bucket)}); err != nil {
		t.Fatal(err)
	}
	s := open(t, c)
	if _, err := admin(c).DeleteBucket(t.Context(), &s3.DeleteBucketInput{Bucket: aws.String(c.Bucket)}); err != nil {
		t.Fatal(err)
	}
	check := func(what string, err error) {
		t.Helper()
		if err == nil || errors.Is(err, ports.ErrNotFound) || errors.Is(err, ports.ErrConflict) || !strings.Contains(err.Error(), "NoSuchBucket") {
			t.Errorf("%s in a bucket removed since the store opened: %v, want an error naming NoSuchBucket, neither ErrNotFound nor ErrConflict", what, err)
		}
	}
	for _, opts := range []ports.PutObjectOptions{{}, {IfAbsent: true}, {IfMatch: "0123"}} {
		for _, size := range []int{10, 12 << 20} {
			_, err := s.Put(t.Context(), "k", bytes.NewReader(make([]byte, size)), opts)
			check(fmt.Sprintf("a Put of %d bytes, %+v,", size, opts), err)
		}
	}
	r, _, err := s.Get(t.Context(), "k", ports.GetObjectOptions{})
	if r != nil {
		r.Close()
	}
	check("a Get", err)
	_, _, err = s.List(t.Context(), "", 10, "")
	check("a List", err)
}
