// Package backendtest is for the harness of an adapter on a server
// (PostgreSQL, S3, Redis, ...): it finds the server from the environment
// and gives each test a namespace of its own on it, removed when the test
// ends. Parallel subtests, and parallel runs by several people on one
// shared server, then never meet.
//
//	addr := backendtest.Lookup(t, "ENGINE_TEST_REDIS_ADDR", "Redis", false)
//	prefix := backendtest.Namespace(t, "kv", func(ctx context.Context, ns string) error {
//		return dropEverythingUnder(ctx, addr, ns)
//	})
package backendtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"regexp"
	"testing"
	"time"

	"github.com/abi-engine/engine/internal/testenv"
)

// RequireVar is the variable that makes a missing server fail the test
// instead of skipping it; CI and `make test` set it to 1.
const RequireVar = testenv.RequireVar

// Lookup returns the value of the environment variable name, by convention
// ENGINE_TEST_<BACKEND>_<WHAT> (ENGINE_TEST_PG_DSN, ENGINE_TEST_REDIS_ADDR).
// When it is unset the test is skipped, naming the variable and what (the
// server), or fails when RequireVar is 1. Pass optional for a server CI
// cannot have: its tests always skip without it.
func Lookup(tb testing.TB, name, what string, optional bool) string {
	tb.Helper()
	return testenv.Lookup(tb, name, what, optional)
}

// cleanupTimeout bounds drop, which runs after the test's context ended.
const cleanupTimeout = 30 * time.Second

var namespacePrefix = regexp.MustCompile(`^[a-z][a-z0-9]{0,15}$`)

// Namespace returns a name unique to this test and this run: prefix (1 to
// 16 of [a-z0-9], starting with a letter), a hash of the test's name, and
// random digits, as in "kv3f2a9c01b2d4e5f6a1b2c3". It is usable as a
// table, bucket, key prefix or collection name on every backend we know:
// it holds only lowercase letters and digits, since an S3 bucket takes no
// "_" and a SQL table no "-".
// When the test ends, drop is called with the name to remove what the test
// made under it; an error there fails the test.
func Namespace(tb testing.TB, prefix string, drop func(ctx context.Context, ns string) error) string {
	tb.Helper()
	if !namespacePrefix.MatchString(prefix) {
		tb.Fatalf("backendtest.Namespace: prefix %q is not 1 to 16 of [a-z0-9] starting with a letter", prefix)
	}
	h := fnv.New64a()
	h.Write([]byte(tb.Name()))
	var r [3]byte
	if _, err := rand.Read(r[:]); err != nil {
		tb.Fatalf("backendtest.Namespace: random suffix: %v", err)
	}
	ns := fmt.Sprintf("%s%016x%s", prefix, h.Sum64(), hex.EncodeToString(r[:]))
	if drop != nil {
		tb.Cleanup(func() {
			// The test's own context has ended by now.
			ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			defer cancel()
			if err := drop(ctx, ns); err != nil {
				tb.Errorf("remove the test's namespace %s: %v", ns, err)
			}
		})
	}
	return ns
}
