package natsclient

import (
	"context"
	"testing"
	"time"

	"github.com/abi-engine/engine/internal/wire"
)

// An engine that names no window, as engines did before windows, gets one
// chunk at a time; one that names more than an engine may is held to the
// most. Each chunk has the time of one call for every chunk it may wait on.
func TestAPutTakesTheWindowTheEngineNames(t *testing.T) {
	o := ObjectStorage{c: New(nil, WithTimeout(3*time.Second))}
	for named, want := range map[int]int{0: 1, 1: 1, 4: 4, wire.MaxTransferWindow + 1: wire.MaxTransferWindow, 1 << 20: wire.MaxTransferWindow} {
		w := o.writer(t.Context(), wire.SessionOpened{ID: "owner:x", Window: named})
		if w.window != want {
			t.Errorf("an engine that names a window of %d: the Put keeps %d out, want %d", named, w.window, want)
		}
		ctx, cancel := w.callContext(2 * w.window)
		deadline, _ := ctx.Deadline()
		if most := time.Duration(2*want) * 3 * time.Second; time.Until(deadline) > most || time.Until(deadline) < most-time.Minute {
			t.Errorf("window %d: a chunk waits %v, want %v", w.window, time.Until(deadline).Round(time.Second), most)
		}
		cancel()
		w.stop()
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	if w := o.writer(ctx, wire.SessionOpened{ID: "owner:x", Window: 4}); w.timeout != 0 {
		t.Errorf("a Put with a deadline of its own gives each chunk %v more", w.timeout)
	}
}
