package ports_test

import (
	"context"
	"testing"
	"time"

	"github.com/abi-engine/engine/ports"
)

// Every call an engine handles over NATS with an Abi-Wait carries the
// moment its answer is due, so carrying it costs one allocation, the
// context's, where context.WithValue cost two: the context, and the time
// boxed as its value. The moment reads back as it was set, under a
// cancelable context made over it too, and a context without it has none.
func TestCarryingTheMomentAnAnswerIsDueCostsOneAllocation(t *testing.T) {
	by := time.Date(2026, 12, 7, 10, 2, 11, 0, time.UTC)
	if _, ok := ports.AnswerBy(context.Background()); ok {
		t.Fatal("a context without a moment has one")
	}
	ctx, cancel := context.WithCancel(ports.WithAnswerBy(context.Background(), by))
	t.Cleanup(cancel)
	if got, ok := ports.AnswerBy(ctx); !ok || !got.Equal(by) {
		t.Fatalf("the moment reads back as %v, %v, want %v", got, ok, by)
	}
	base := context.Background()
	if n := testing.AllocsPerRun(100, func() { ctx = ports.WithAnswerBy(base, by) }); n > 1 {
		t.Fatalf("carrying the moment an answer is due allocates %v times, want 1", n)
	}
}
