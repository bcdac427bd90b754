package backendtest_test

import (
	"context"
	"regexp"
	"testing"

	"github.com/abi-engine/engine/contracttests/backendtest"
	"github.com/abi-engine/engine/storecheck"
)

func TestNamespacesDifferAndAreDropped(t *testing.T) {
	var dropped []string
	t.Run("a", func(t *testing.T) {
		first := backendtest.Namespace(t, "kv", func(_ context.Context, ns string) error {
			dropped = append(dropped, ns)
			return nil
		})
		second := backendtest.Namespace(t, "kv", nil)
		if first == second {
			t.Fatalf("two namespaces of one test are both %q", first)
		}
		if !regexp.MustCompile(`^kv[0-9a-f]{16}[0-9a-f]{6}$`).MatchString(first) {
			t.Fatalf("namespace %q", first)
		}
		if len(dropped) != 0 {
			t.Fatalf("dropped %q before the test ended", dropped)
		}
	})
	if len(dropped) != 1 {
		t.Fatalf("dropped %q when the test ended, want its one namespace", dropped)
	}
}

// s3Bucket is the rule of S3 bucket names: 3 to 63 of lowercase letters,
// digits, dots and hyphens, starting and ending with a letter or digit.
var s3Bucket = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// A namespace is good as a name on every backend, as its documentation
// says: an S3 bucket (which refuses "_": versitygw answers
// InvalidBucketName), a SQL table, a document or vector collection.
func TestANamespaceIsAValidNameOnEveryBackend(t *testing.T) {
	for _, prefix := range []string{"k", "kv", "abcdefghijklmnop"} {
		ns := backendtest.Namespace(t, prefix, nil)
		if !s3Bucket.MatchString(ns) {
			t.Errorf("namespace %q is no S3 bucket name", ns)
		}
		if err := storecheck.Table("table", ns); err != nil {
			t.Errorf("namespace %q is no SQL table name: %v", ns, err)
		}
		if err := storecheck.Collection(ns); err != nil {
			t.Errorf("namespace %q is no collection name: %v", ns, err)
		}
	}
}
