package memory_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/document/memory"
	"github.com/abi-engine/engine/ports"
)

// A store opened without settings holds at most 64 MiB: a caller putting
// document after document is refused with ports.ErrStorageFull, which the
// API answers 507, once the store is full, and what was stored stays.
// Before, the store held whatever callers sent, until the engine, holding
// the lease, ran out of memory.
func TestADocumentStoreWithoutSettingsRefusesPutsPast64MiB(t *testing.T) {
	s, err := memory.Open(t.Context(), memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.EnsureCollection(t.Context(), "c"); err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("t", 1<<20)
	var versions []uint64
	for len(versions) < 80 {
		var d ports.Document
		if d, err = s.Put(t.Context(), "c", fmt.Sprintf("d%02d", len(versions)), map[string]any{"text": text}, ports.Cond{}); err != nil {
			break
		}
		versions = append(versions, d.Version)
	}
	if !errors.Is(err, ports.ErrStorageFull) || len(versions) != 63 {
		t.Fatalf("put %d documents of 1 MiB into a store without settings: %v, want ports.ErrStorageFull at the 64th", len(versions), err)
	}
	// Each document is still there at the version it was put at: a delete
	// conditioned on that version takes it. A get would say as much, but
	// would decode a mebibyte of JSON for each, under the race detector.
	for i, v := range versions {
		if err := s.Delete(t.Context(), "c", fmt.Sprintf("d%02d", i), ports.IfVersion(v)); err != nil {
			t.Fatalf("document %d, stored at version %d before the store was full: %v", i, v, err)
		}
	}
}

func open(t *testing.T, maxBytes int64) *memory.Store {
	t.Helper()
	s, err := memory.Open(t.Context(), memory.Config{MaxBytes: maxBytes})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// docCost is what a document of id and canonical JSON text counts against
// max_bytes; a collection counts its name and the upkeep.
func docCost(id, raw string) int64 { return int64(len(id) + len(raw) + memory.EntryOverhead) }

// A full store refuses a put that needs room, and a new collection, as
// storage full, naming max_bytes; a put that frees as much as it takes (a
// document replaced by one as large) is stored, and so are the puts made
// once a delete or a dropped collection has made room. The store never
// drops a document to make room.
func TestAFullDocumentStoreRefusesWhatNeedsRoomAndKeepsWhatItHolds(t *testing.T) {
	ctx := t.Context()
	data := map[string]any{"n": 1.0} // {"n":1}
	s := open(t, 2*int64(len("c")+memory.CollectionOverhead)+3*docCost("d1", `{"n":1}`))
	for _, c := range []string{"c", "e"} {
		if err := s.EnsureCollection(ctx, c); err != nil {
			t.Fatalf("EnsureCollection(%s): %v", c, err)
		}
	}
	for _, id := range []string{"d1", "d2", "d3"} {
		if _, err := s.Put(ctx, "c", id, data, ports.Cond{}); err != nil {
			t.Fatalf("Put(%s) into room for three: %v", id, err)
		}
	}
	_, err := s.Put(ctx, "c", "d4", data, ports.Cond{})
	if !errors.Is(err, ports.ErrStorageFull) || !strings.Contains(err.Error(), "max_bytes") {
		t.Fatalf("a fourth Put into room for three: %v, want ErrStorageFull naming max_bytes", err)
	}
	if err := s.EnsureCollection(ctx, "f"); !errors.Is(err, ports.ErrStorageFull) {
		t.Fatalf("a new collection in a full store: %v, want ErrStorageFull", err)
	}
	if _, err := s.Put(ctx, "c", "d1", map[string]any{"n": 2.0}, ports.Cond{}); err != nil {
		t.Fatalf("replacing a document by one as large in a full store: %v", err)
	}
	if n, err := s.Count(ctx, "c", nil); n != 3 || err != nil {
		t.Fatalf("Count in the full store = %d, %v; want the 3 it held", n, err)
	}
	if err := s.Delete(ctx, "c", "d2", ports.Cond{}); err != nil {
		t.Fatalf("Delete(d2): %v", err)
	}
	if _, err := s.Put(ctx, "c", "d4", data, ports.Cond{}); err != nil {
		t.Fatalf("Put once a delete made room: %v", err)
	}
	if err := s.DropCollection(ctx, "e"); err != nil {
		t.Fatalf("DropCollection(e): %v", err)
	}
	if err := s.EnsureCollection(ctx, "f"); err != nil {
		t.Fatalf("a new collection once a drop made room: %v", err)
	}
	if err := s.DropCollection(ctx, "c"); err != nil {
		t.Fatalf("DropCollection(c): %v", err)
	}
	if err := s.EnsureCollection(ctx, "g"); err != nil {
		t.Fatalf("EnsureCollection once a collection of documents was dropped: %v", err)
	}
	for _, id := range []string{"d1", "d2", "d3"} {
		if _, err := s.Put(ctx, "g", id, data, ports.Cond{}); err != nil {
			t.Fatalf("Put(%s) once a collection of documents was dropped: %v", id, err)
		}
	}
}

// A document larger than the whole store is refused as too large, 413,
// not as storage full: no room made would let it in.
func TestADocumentLargerThanTheStoreIsRefusedAsTooLarge(t *testing.T) {
	s := open(t, 1024)
	if err := s.EnsureCollection(t.Context(), "c"); err != nil {
		t.Fatal(err)
	}
	_, err := s.Put(t.Context(), "c", "d", map[string]any{"text": strings.Repeat("t", 1024)}, ports.Cond{})
	if !errors.Is(err, ports.ErrTooLarge) || !strings.Contains(err.Error(), "max_bytes") {
		t.Fatalf("Put of a document over 1024 bytes into a store of 1024: %v, want ErrTooLarge naming max_bytes", err)
	}
}

// A negative max_bytes is refused, naming the setting; 0 is the default.
func TestANegativeMaxBytesIsRefused(t *testing.T) {
	err := memory.Config{MaxBytes: -1}.Check("services.document.config")
	if !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), "services.document.config.max_bytes") {
		t.Fatalf("Check of max_bytes -1 = %v, want ErrInvalidArgument naming services.document.config.max_bytes", err)
	}
	if _, err := memory.Open(t.Context(), memory.Config{MaxBytes: -1}); !errors.Is(err, ports.ErrInvalidArgument) {
		t.Fatalf("Open with max_bytes -1 = %v, want ErrInvalidArgument", err)
	}
	c := memory.Config{}
	if c.Default(""); c.MaxBytes != memory.DefaultMaxBytes {
		t.Fatalf("the default max_bytes is %d, want %d", c.MaxBytes, memory.DefaultMaxBytes)
	}
}
