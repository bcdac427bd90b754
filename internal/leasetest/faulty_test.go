package leasetest_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/lease/memory"
	"github.com/abi-engine/engine/internal/leasetest"
)

// A read whose request or reply is held past its caller's deadline ends
// at the deadline with a fault, as a real client gives up: the caller
// never hears an answer that comes after it stopped listening.
func TestAReadEndsWithItsContext(t *testing.T) {
	for _, held := range []struct {
		name       string
		req, reply time.Duration
	}{
		{"request", time.Minute, 0},
		{"reply", 0, time.Minute},
	} {
		t.Run(held.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := leasetest.Wrap(memory.New())
				f.Delay(held.req, held.reply)
				ctx, cancel := context.WithTimeout(t.Context(), time.Second)
				defer cancel()
				start := time.Now()
				_, err := f.Read(ctx)
				if !errors.Is(err, leasetest.ErrFault) || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("a read with its %s held past its deadline: %v, want a fault and the deadline", held.name, err)
				}
				if took := time.Since(start); took != time.Second {
					t.Fatalf("the read returned after %v, want at its deadline, 1s", took)
				}
			})
		})
	}
}
