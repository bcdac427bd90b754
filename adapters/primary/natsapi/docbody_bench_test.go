package natsapi_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/internal/wire"
)

// BenchmarkDocumentBody reads the body of a document put as the handler
// does, by its hand reader or else strictly: a small document, and one of
// 200 records of five fields each, about 20 KiB.
func BenchmarkDocumentBody(b *testing.B) {
	records := make([]any, 200)
	for i := range records {
		records[i] = map[string]any{"id": fmt.Sprintf("r%05d", i), "name": "a record", "n": i, "ok": i%2 == 0, "tags": []any{"x", "y"}}
	}
	for _, c := range []struct {
		name string
		data map[string]any
	}{
		{"small", map[string]any{"name": "bench", "n": 1}},
		{"records", map[string]any{"records": records}},
	} {
		body, err := json.Marshal(wire.DocWrite{Collection: "bench", ID: "d1", Data: c.data})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var out wire.DocWrite
				if d, ok := any(&out).(wire.FastDecoder); !ok || !d.DecodeJSON(body) {
					if err := natsapi.Decode(body, &out); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(len(body)), "bytes")
		})
	}
}

// BenchmarkDocumentAnswer writes the answer of a document get or put as
// the handler does: a small document, and one of 200 records of five
// fields each, about 20 KiB, its data as a store gives it back.
func BenchmarkDocumentAnswer(b *testing.B) {
	for _, c := range []struct {
		name string
		data string
	}{
		{"small", `{"name":"bench","n":1}`},
		{"records", string(recordsJSON(200))},
	} {
		var data map[string]any
		if err := json.Unmarshal([]byte(c.data), &data); err != nil {
			b.Fatal(err)
		}
		doc := wire.Document{ID: "d1", Version: 7, Data: data}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := wire.Marshal(doc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// recordsJSON is data of n records of five fields each.
func recordsJSON(n int) []byte {
	records := make([]any, n)
	for i := range records {
		records[i] = map[string]any{"id": fmt.Sprintf("r%05d", i), "name": "a record", "n": i, "ok": i%2 == 0, "tags": []any{"x", "y"}}
	}
	b, _ := json.Marshal(map[string]any{"records": records})
	return b
}
