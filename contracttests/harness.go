package contracttests

import (
	"reflect"
	"testing"
)

// Harness opens stores of one port, P, for that port's suite: RunKeyValue
// takes a Harness[ports.KeyValue], RunLease a Harness[ports.Lease], and so
// on. The secret suite alone takes a SecretHarness, since a secret store is
// read-only through its port and the suite must say what it holds.
type Harness[P any] interface {
	// NewStore makes a fresh, empty store for one subtest and returns a
	// function that opens a handle on it. Every handle sees the same data;
	// an adapter with connections gives each handle its own, and closes it
	// when the test ends.
	NewStore(t *testing.T) (open func(t *testing.T) P)
}

// HarnessFunc adapts a function to Harness, so a harness is one closure:
//
//	contracttests.RunKeyValue(t, contracttests.HarnessFunc[ports.KeyValue](
//		func(t *testing.T) func(*testing.T) ports.KeyValue { ... }), caps)
type HarnessFunc[P any] func(t *testing.T) func(t *testing.T) P

// NewStore calls f.
func (f HarnessFunc[P]) NewStore(t *testing.T) func(t *testing.T) P { return f(t) }

// newStore calls h.NewStore and checks what the harness hands back, so a
// harness that returns nothing fails its subtest instead of panicking the
// test binary and losing every other subtest's result.
func newStore[P any](t *testing.T, h Harness[P]) func(t *testing.T) P {
	t.Helper()
	open := h.NewStore(t)
	if open == nil {
		t.Fatalf("%s: the harness's NewStore returned no open function", adapterName(t))
	}
	return func(t *testing.T) P {
		t.Helper()
		p := open(t)
		if any(p) == nil {
			t.Fatalf("%s: the harness's open returned a nil %v", adapterName(t), reflect.TypeFor[P]())
		}
		return p
	}
}
