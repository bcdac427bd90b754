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
//   - every blocking call runs under a deadline, so a hung adapter fails
//     the test instead of hanging it;
//   - a capability an adapter lacks is skipped with t.Skipf and a reason.
package contracttests

import (
	"context"
	"testing"
	"time"
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
