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

// A Get asks for as many chunks ahead as the engine names, one at a time
// when it names none, 16 at most; it asks for none past the end of the
// range the open described; each read has the time of one call for every
// chunk the engine may read to answer it.
func TestAGetTakesTheWindowTheEngineNames(t *testing.T) {
	o := ObjectStorage{c: New(nil, WithTimeout(3*time.Second))}
	for named, want := range map[int]int{0: 1, 1: 1, 4: 4, wire.MaxTransferWindow + 1: wire.MaxTransferWindow} {
		r := o.reader(t.Context(), wire.SessionOpened{ID: "owner:x", ChunkSize: 10, Window: named, Object: &wire.ObjectInfo{Size: 100}}, wire.TransferOpen{})
		if r.window != want || r.timeout != 3*time.Second {
			t.Errorf("an engine that names a window of %d: the Get keeps %d out, %v each, want %d, 3s", named, r.window, r.timeout, want)
		}
		r.stop()
	}
	for _, c := range []struct {
		size   int64
		req    wire.TransferOpen
		chunks int64
	}{
		{0, wire.TransferOpen{}, 1},                        // one empty chunk, the last
		{9, wire.TransferOpen{}, 1},                        // one short chunk
		{10, wire.TransferOpen{}, 2},                       // a full chunk, then an empty last one
		{95, wire.TransferOpen{Offset: 50}, 5},             // 45 bytes
		{95, wire.TransferOpen{Length: 30}, 4},             // 30 bytes
		{95, wire.TransferOpen{Offset: 90, Length: 30}, 1}, // the last 5 bytes
		{95, wire.TransferOpen{Offset: 200}, 1},            // past the end
	} {
		r := o.reader(t.Context(), wire.SessionOpened{ID: "owner:x", ChunkSize: 10, Window: 4, Object: &wire.ObjectInfo{Size: c.size}}, c.req)
		if r.chunks != c.chunks {
			t.Errorf("an object of %d bytes, %+v: %d chunks expected, want %d", c.size, c.req, r.chunks, c.chunks)
		}
		r.stop()
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	if r := o.reader(ctx, wire.SessionOpened{ID: "owner:x", Window: 4}, wire.TransferOpen{}); r.timeout != 0 {
		t.Errorf("a Get with a deadline of its own gives each read %v more", r.timeout)
	}
}
