package natsclient

import (
	"context"
	"testing"
	"time"

	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
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
		r := o.reader(t.Context(), wire.SessionOpened{ID: "owner:x", ChunkSize: 10, Window: named, Object: &wire.ObjectInfo{Size: 100}}, ports.GetObjectOptions{})
		if r.window != want || r.timeout != 3*time.Second {
			t.Errorf("an engine that names a window of %d: the Get keeps %d out, %v each, want %d, 3s", named, r.window, r.timeout, want)
		}
		r.stop()
	}
	for _, c := range []struct {
		size   int64
		opts   ports.GetObjectOptions
		chunks int64
	}{
		{0, ports.GetObjectOptions{}, 1},             // one empty chunk, the last
		{9, ports.GetObjectOptions{}, 1},             // one short chunk
		{10, ports.GetObjectOptions{}, 2},            // a full chunk, then an empty last one
		{95, ports.GetObjectOptions{Offset: 50}, 5},  // 45 bytes
		{95, ports.GetObjectOptions{Length: 30}, 4},  // 30 bytes
		{95, ports.GetObjectOptions{Offset: 200}, 1}, // past the end
	} {
		r := o.reader(t.Context(), wire.SessionOpened{ID: "owner:x", ChunkSize: 10, Window: 4, Object: &wire.ObjectInfo{Size: c.size}}, c.opts)
		if r.chunks != c.chunks {
			t.Errorf("an object of %d bytes, %+v: %d chunks expected, want %d", c.size, c.opts, r.chunks, c.chunks)
		}
		r.stop()
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	if r := o.reader(ctx, wire.SessionOpened{ID: "owner:x", Window: 4}, ports.GetObjectOptions{}); r.timeout != 0 {
		t.Errorf("a Get with a deadline of its own gives each read %v more", r.timeout)
	}
}
