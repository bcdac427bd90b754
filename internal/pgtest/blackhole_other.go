//go:build !linux

package pgtest

import "testing"

// Blackhole needs Linux's network namespaces: the test is skipped.
func Blackhole(t testing.TB, target string) (addr string, cut func()) {
	t.Helper()
	t.Skip("pgtest: a blackhole needs Linux")
	return "", nil
}
