// Package contracttests holds one suite per port. Every adapter runs the
// suite of its port from a small test file: a harness that opens fresh,
// isolated stores, plus one Test function. The suites know ports only, never
// adapters, so an adapter written elsewhere runs them the same way.
//
// Conventions every suite follows, so that a new one reads like the others:
//   - subtests have plain CamelCase names: go test -run 'TestLeaseContract/memory/CreateRace';
//   - each subtest runs in parallel on a store of its own, so a suite can
//     share one server;
//   - a harness can hand out two handles on one store, so races between two
//     engines are tested, not assumed;
//   - every blocking call runs under a deadline, so an adapter that honours
//     its context but never answers fails the test; one that ignores its
//     context and blocks for ever hangs the suite until go test's -timeout;
//   - a capability an adapter lacks is skipped with t.Skipf and a reason;
//   - a failure names the method that broke the rule and is a plain
//     t.Errorf or t.Fatalf: no failure path indexes, dereferences or
//     reports from a goroutine in a way that could panic the test binary
//     whatever the adapter returns.
package contracttests

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/abi-engine/engine/ports"
)

// callTimeout bounds every blocking call of a suite.
const callTimeout = 10 * time.Second

// ctx returns a context that ends at the call timeout or with the test.
func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(t.Context(), callTimeout)
	t.Cleanup(cancel)
	return c
}

// contextWithCancel is ctx with a cancel of its own.
func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	t.Helper()
	return context.WithCancel(ctx(t))
}

// expiredShown reports that method still showed key after the TTL it was
// written with passed, and blames the method that broke the rule: if Get
// returns key as well, writer kept the TTL too long or dropped it; if Get
// says it expired, method ignores an expiry that Get honours.
func expiredShown(t *testing.T, get func(context.Context, string) ([]byte, error), ttl time.Duration, key, writer, method string) {
	t.Helper()
	v, err := get(ctx(t), key)
	switch {
	case err == nil:
		t.Errorf("%s %q with a TTL of %v: %s shows it and Get still returns %q after the TTL passed; %s kept the TTL too long or dropped it",
			writer, key, ttl, method, v, writer)
	case errors.Is(err, ports.ErrNotFound):
		t.Errorf("%s shows %q after its TTL of %v passed, while Get says it expired: %s ignores expiry", method, key, ttl, method)
	default:
		t.Errorf("%s shows %q after its TTL of %v passed; Get %q to tell why: %v", method, key, ttl, key, err)
	}
}
