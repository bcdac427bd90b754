package s3_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/abi-engine/engine/ports"
)

// versitygw keeps its own files (uploads in progress, multipart parts under
// .sgwtmp/multipart/<sha256 of the key>/) in a ".sgwtmp" directory of the
// bucket. A key that reaches them is refused, or else it is an object like
// any other: it is listed, and it never stops another key's Put.
func TestAKeyNeverReachesTheServersOwnFiles(t *testing.T) {
	c := server(t)
	c.Bucket = newBucket(t, c)
	s := open(t, c)
	sum := sha256.Sum256([]byte("victim"))
	keys := []string{".sgwtmp/multipart/" + hex.EncodeToString(sum[:]), "a/.sgwtmp"}
	// List does not show such objects, so the bucket's own cleanup, which
	// runs after this one, would not find them.
	t.Cleanup(func() {
		for _, key := range keys {
			_, _ = admin(c).DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String(c.Bucket), Key: aws.String(key)})
		}
	})
	var stored []string
	for _, key := range keys {
		_, err := s.Put(t.Context(), key, strings.NewReader("x"), ports.PutObjectOptions{})
		switch {
		case errors.Is(err, ports.ErrInvalidArgument):
		case err != nil:
			t.Errorf("Put %q: %v, want success or ErrInvalidArgument", key, err)
		default:
			stored = append(stored, key)
		}
	}
	if _, err := s.Put(t.Context(), "victim", bytes.NewReader(make([]byte, 12<<20)), ports.PutObjectOptions{}); err != nil {
		t.Errorf("another caller stored %q; a 12 MiB Put of \"victim\" now fails: %v", stored, err)
	}
	infos, _, err := s.List(t.Context(), "", 100, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range stored {
		if !slices.ContainsFunc(infos, func(i ports.ObjectInfo) bool { return i.Key == key }) {
			t.Errorf("Put %q succeeded, but List does not show it", key)
		}
	}
}
