package natsapi_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/internal/wire"
)

// BenchmarkDocumentBody reads a put of a document of 200 records of five
// fields each, about 20 KiB, strictly, as every document put is read.
func BenchmarkDocumentBody(b *testing.B) {
	records := make([]any, 200)
	for i := range records {
		records[i] = map[string]any{"id": fmt.Sprintf("r%05d", i), "name": "a record", "n": i, "ok": i%2 == 0, "tags": []any{"x", "y"}}
	}
	body, err := json.Marshal(wire.DocWrite{Collection: "bench", ID: "d1", Data: map[string]any{"records": records}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		var out wire.DocWrite
		if err := natsapi.Decode(body, &out); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(body)), "bytes")
}
