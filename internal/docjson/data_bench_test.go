package docjson

import (
	"fmt"
	"testing"
)

// BenchmarkData: what a document put costs before it reaches its store, a
// small document and one of 200 records of five fields, about 20 KiB, each
// as a decoder of the wire hands it over (go test -bench Data ./internal/docjson/).
func BenchmarkData(b *testing.B) {
	records := make([]any, 200)
	for i := range records {
		records[i] = map[string]any{"id": fmt.Sprintf("r%05d", i), "name": "a record", "n": float64(i), "ok": i%2 == 0, "tags": []any{"x", "y"}}
	}
	for _, c := range []struct {
		name string
		data map[string]any
	}{
		{"small", map[string]any{"name": "bench", "n": 1.0}},
		{"records", map[string]any{"records": records}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := Data("doc-1", c.data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
