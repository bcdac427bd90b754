package natsapi_test

import (
	"bytes"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	docmemory "github.com/abi-engine/engine/adapters/secondary/document/memory"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// repeated is prefix, then elem n times apart by commas, then suffix.
func repeated(prefix, elem string, n int, suffix string) []byte {
	var b bytes.Buffer
	b.Grow(len(prefix) + n*(len(elem)+1) + len(suffix))
	b.WriteString(prefix)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(elem)
	}
	b.WriteString(suffix)
	return b.Bytes()
}

// allocated is how many bytes of heap f allocates, garbage included, as
// the process counts them: other goroutines of the test binary add a
// little, which the bounds below leave room for.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A 4 MiB document of empty objects, 1.4 million values, decoded into Go
// allocated 180 times its bytes (about 720 MiB; 357 MiB live for 16 MiB),
// and every byte of an uploaded body was all that counted against its
// caller's share. It is refused before it is decoded, naming the bound,
// having cost a pass over its first values.
func TestABodyOfMoreValuesThanTheBoundIsRefusedBeforeItIsDecoded(t *testing.T) {
	body := repeated(`{"collection":"c","id":"d","data":{"a":[`, `{}`, (4<<20)/3, `]}}`)
	var err error
	var req wire.DocWrite
	got := allocated(func() { err = natsapi.Decode(body, &req) })
	if most := uint64(1 << 20); got > most {
		t.Errorf("reading a body of %d bytes allocated %d bytes, want at most %d", len(body), got, most)
	}
	if !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), "more than "+strconv.Itoa(wire.MaxValues)+" JSON values") {
		t.Fatalf("Decode of %d bytes, %d values = %v, want 400 naming the bound of %d values", len(body), (4<<20)/3, err, wire.MaxValues)
	}
}

// At the bound, a body of the costliest shape found, objects of one field
// holding an empty object, decodes, and its decoding allocates some tens
// of MiB: what one call can make the engine spend decoding, whatever the
// bytes of its body.
func TestABodyAtTheBoundDecodesWithinABoundedHeap(t *testing.T) {
	for _, c := range []struct {
		name, elem string
		values     int // each element's
	}{
		{"EmptyObjects", `{}`, 1},
		{"ObjectsOfAnObject", `{"a":{}}`, 2},
		{"Numbers", `1`, 1},
		{"Strings", `"s"`, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The body, its data, the array and the collection and id.
			n := (wire.MaxValues - 5) / c.values
			body := repeated(`{"collection":"c","id":"d","data":{"a":[`, c.elem, n, `]}}`)
			var err error
			var req wire.DocWrite
			got := allocated(func() { err = natsapi.Decode(body, &req) })
			if err != nil {
				t.Fatalf("Decode of %d values at the bound: %v", n*c.values+5, err)
			}
			if most := uint64(128 << 20); got > most {
				t.Fatalf("decoding %d values in %d bytes allocated %d bytes, want at most %d", n*c.values+5, len(body), got, most)
			}
			t.Logf("%d values in %d bytes: %d bytes allocated", n*c.values+5, len(body), got)
			if _, err := wire.Marshal(req); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// One value more than the bound is refused, whether the values are the
// body's own fields, a document's data or a vector's payload; the numbers
// of a vector's values count one for every eight, so a batch of many
// vectors given as numbers is taken.
func TestTheBoundCountsTheValuesOfEveryPartOfABody(t *testing.T) {
	for _, c := range []struct {
		name string
		body []byte
		v    any
		ok   bool
	}{
		{"DataAtTheBound", repeated(`{"collection":"c","id":"d","data":{"a":[`, `null`, wire.MaxValues-5, `]}}`), &wire.DocWrite{}, true},
		{"DataPastTheBound", repeated(`{"collection":"c","id":"d","data":{"a":[`, `null`, wire.MaxValues-4, `]}}`), &wire.DocWrite{}, false},
		{"WherePastTheBound", repeated(`{"collection":"c","where":{"a":[`, `0`, wire.MaxValues, `]}}`), &wire.DocQuery{}, false},
		{"IDsPastTheBound", repeated(`{"collection":"c","ids":[`, `"x"`, wire.MaxValues, `]}`), &wire.VecIDs{}, false},
		{"VectorsPastTheBound", repeated(`{"collection":"c","vectors":[`, `{}`, wire.MaxValues, `]}`), &wire.VecWrite{}, false},
		{"PayloadsPastTheBound", repeated(`{"collection":"c","vectors":[{"id":"a","values":[1],"payload":{"a":[`, `true`, wire.MaxValues, `]}}]}`), &wire.VecWrite{}, false},
		{"NumbersOfAVector", repeated(`{"collection":"c","vectors":[{"id":"a","values":[`, `0.5`, 3*wire.MaxValues, `]}]}`), &wire.VecWrite{}, true},
		{"NumbersOfASearch", repeated(`{"collection":"c","k":1,"vector":[`, `-1e-3`, 3*wire.MaxValues, `]}`), &wire.VecQuery{}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := natsapi.Decode(c.body, c.v)
			if c.ok && err != nil {
				t.Fatalf("Decode: %v, want it taken", err)
			}
			if !c.ok && (!errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), "JSON values")) {
				t.Fatalf("Decode = %v, want 400 naming the bound", err)
			}
		})
	}
}

// The hand reader of an upsert counts as the strict path does: it takes a
// body at the bound, and leaves one value more to the strict path, which
// refuses it, so that it never builds more than the bound either.
func TestTheHandReaderOfAnUpsertKeepsTheBound(t *testing.T) {
	// The body, collection, vectors, the vector, its id and values, its
	// payload and the array in it: 8, and the nulls.
	at := repeated(`{"collection":"c","vectors":[{"id":"a","values":[1,2],"payload":{"a":[`, `null`, wire.MaxValues-8, `]}}]}`)
	past := repeated(`{"collection":"c","vectors":[{"id":"a","values":[1,2],"payload":{"a":[`, `null`, wire.MaxValues-7, `]}}]}`)
	many := repeated(`{"collection":"c","vectors":[`, `{}`, 4*wire.MaxValues, `]}`)
	var w wire.VecWrite
	if !w.DecodeJSON(at) {
		t.Fatal("the hand reader declined an upsert at the bound")
	}
	if err := natsapi.Decode(at, &wire.VecWrite{}); err != nil {
		t.Fatalf("the strict path refused an upsert at the bound: %v", err)
	}
	for _, body := range [][]byte{past, many} {
		var w wire.VecWrite
		var took bool
		got := allocated(func() { took = w.DecodeJSON(body) })
		if took {
			t.Fatalf("the hand reader took an upsert of %d bytes past the bound", len(body))
		}
		if most := uint64(64 << 20); got > most {
			t.Fatalf("the hand reader allocated %d bytes on an upsert of %d bytes past the bound, want at most %d", got, len(body), most)
		}
		if err := natsapi.Decode(body, &wire.VecWrite{}); !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), "JSON values") {
			t.Fatalf("the strict path = %v, want 400 naming the bound", err)
		}
	}
	vectors := natsapi.VectorStore(newMemoryVectors(t))
	for _, ep := range vectors.Endpoints {
		if ep.Name != wire.VecUpsert {
			continue
		}
		if _, err := ep.Handler(t.Context(), &natsapi.Call{Data: many}); !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), "JSON values") {
			t.Fatalf("upsert of %d empty vectors = %v, want 400 naming the bound", 4*wire.MaxValues, err)
		}
	}
}

// The hand reader of a document put counts as the strict path does: it
// takes a body at the bound, and leaves one value more to the strict path,
// which refuses it; a large body past the bound it leaves having built
// nothing of it, as the strict path refuses it before it decodes.
func TestTheHandReaderOfADocumentPutKeepsTheBound(t *testing.T) {
	// The body, its collection, id and data, the array in it, and the nulls.
	at := repeated(`{"collection":"c","id":"d","data":{"a":[`, `null`, wire.MaxValues-5, `]}}`)
	past := repeated(`{"collection":"c","id":"d","data":{"a":[`, `null`, wire.MaxValues-4, `]}}`)
	many := repeated(`{"collection":"c","id":"d","data":{"a":[`, `{}`, (4<<20)/3, `]}}`)
	var w wire.DocWrite
	if !w.DecodeJSON(at) {
		t.Fatal("the hand reader declined a document put at the bound")
	}
	for _, body := range [][]byte{past, many} {
		var w wire.DocWrite
		var took bool
		got := allocated(func() { took = w.DecodeJSON(body) })
		if took {
			t.Fatalf("the hand reader took a document put of %d bytes past the bound", len(body))
		}
		if most := uint64(1 << 20); got > most {
			t.Fatalf("the hand reader allocated %d bytes on a document put of %d bytes past the bound, want at most %d", got, len(body), most)
		}
	}
	docs := natsapi.Document(docmemory.New())
	for _, ep := range docs.Endpoints {
		if ep.Name != wire.DocPut {
			continue
		}
		for _, body := range [][]byte{past, many} {
			if _, err := ep.Handler(t.Context(), &natsapi.Call{Data: body}); !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), "JSON values") {
				t.Fatalf("document put of %d bytes past the bound = %v, want 400 naming the bound", len(body), err)
			}
		}
	}
}

// A body is read in place. A json.Decoder copied it first into a buffer of
// its own, doubling as it filled, so a document of one 16 MiB string cost
// five times its bytes to decode, where the string itself is one.
func TestABodyOfOneLargeStringCostsAboutItsSizeToDecode(t *testing.T) {
	body := []byte(`{"collection":"c","id":"d","data":{"s":"` + strings.Repeat("x", 16<<20) + `"}}`)
	var err error
	var req wire.DocWrite
	got := allocated(func() { err = natsapi.Decode(body, &req) })
	if err != nil {
		t.Fatal(err)
	}
	if most := uint64(2 * len(body)); got > most {
		t.Fatalf("decoding a body of %d bytes allocated %d bytes, want at most %d", len(body), got, most)
	}
}

// The numbers of a vector count one value for every eight, as they decode
// into four bytes each, not nothing: a search of 16 million numbers, a 32
// MiB upload, decoded them all into a vector of 64 MiB, with the buffers
// it grew through, before its dimension was refused.
func TestTheNumbersOfAVectorCountOneForEveryEight(t *testing.T) {
	huge := repeated(`{"collection":"c","k":1,"vector":[`, `0`, 16<<20, `]}`)
	var err error
	got := allocated(func() { err = natsapi.Decode(huge, &wire.VecQuery{}) })
	if limit := uint64(1 << 20); got > limit {
		t.Errorf("reading a search of %d numbers allocated %d bytes, want at most %d", 16<<20, got, limit)
	}
	if !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), "JSON values") {
		t.Fatalf("a search of %d numbers = %v, want 400 naming the bound", 16<<20, err)
	}

	most := 8 * (wire.MaxValues - 4) // the body, collection, k and vector
	at := repeated(`{"collection":"c","k":1,"vector":[`, `0`, most, `]}`)
	if err := natsapi.Decode(at, &wire.VecQuery{}); err != nil {
		t.Fatalf("a search of %d numbers: %v, want it taken", most, err)
	}
	past := repeated(`{"collection":"c","k":1,"vector":[`, `0`, most+8, `]}`)
	if err := natsapi.Decode(past, &wire.VecQuery{}); !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), "JSON values") {
		t.Fatalf("a search of %d numbers = %v, want 400 naming the bound", most+8, err)
	}
	// The body, collection, vectors, the vector, its id and values.
	most = 8 * (wire.MaxValues - 6)
	upsert := repeated(`{"collection":"c","vectors":[{"id":"a","values":[`, `0`, most, `]}]}`)
	var w wire.VecWrite
	if !w.DecodeJSON(upsert) || len(w.Vectors) != 1 || len(w.Vectors[0].Values) != most {
		t.Fatalf("the hand reader declined an upsert of %d numbers, at the bound", most)
	}
	upsert = repeated(`{"collection":"c","vectors":[{"id":"a","values":[`, `0`, most+8, `]}]}`)
	if (&wire.VecWrite{}).DecodeJSON(upsert) {
		t.Fatalf("the hand reader took an upsert of %d numbers, past the bound", most+8)
	}
}
