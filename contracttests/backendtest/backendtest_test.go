package backendtest_test

import (
	"context"
	"regexp"
	"testing"

	"github.com/abi-engine/engine/contracttests/backendtest"
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
		if !regexp.MustCompile(`^kv_[0-9a-f]{16}_[0-9a-f]{6}$`).MatchString(first) {
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
