// Package testenv finds the real servers tests run against. A server comes
// from an environment variable; without it the test skips and says which
// variable, unless ENGINE_TEST_REQUIRE_BACKENDS=1 (as in CI), where a
// missing server fails the test.
package testenv

import (
	"os"
	"testing"
)

// RequireVar is the variable that makes missing backends fail.
const RequireVar = "ENGINE_TEST_REQUIRE_BACKENDS"

// Lookup returns the variable's value. When it is unset, the test is
// skipped with the reason, or fails when backends are required. Set
// optional for a backend that CI cannot have (Qdrant): it always skips.
func Lookup(tb testing.TB, name, what string, optional bool) string {
	tb.Helper()
	v := os.Getenv(name)
	if v != "" {
		return v
	}
	if optional {
		tb.Skipf("%s is not set: no %s to test against", name, what)
	}
	Missing(tb, "%s is not set: no %s to test against", name, what)
	return ""
}

// Missing skips the test for want of something the host lacks, saying
// what, or fails it when backends are required: CI's host must have
// everything a test needs.
func Missing(tb testing.TB, format string, args ...any) {
	tb.Helper()
	if os.Getenv(RequireVar) == "1" {
		tb.Fatalf(format+" (required: %s=1)", append(args, RequireVar)...)
	}
	tb.Skipf(format, args...)
}
