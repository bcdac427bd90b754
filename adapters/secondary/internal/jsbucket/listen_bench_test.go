package jsbucket

import (
	"context"
	"testing"

	"github.com/abi-engine/engine/internal/natstest"
)

// BenchmarkListen measures what listening for refusals adds to a call: a
// write's listening around a request that does nothing, by as many
// callers at once as RunParallel starts, on one connection.
func BenchmarkListen(b *testing.B) {
	nc := natstest.Connect(b, natstest.StartServer(b).ClientURL())
	l := refusalsOf(nc)
	nop := func(context.Context) error { return nil }
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := l.untilWriteRefused(b.Context(), "$KV.B.k", false, nop); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
