package sqlite_test

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/vectorstore/sqlite"
	"github.com/abi-engine/engine/ports"
)

func benchVectors(n, dim int) []ports.Vector {
	r := rand.New(rand.NewPCG(1, 2))
	out := make([]ports.Vector, n)
	for i := range out {
		v := make([]float32, dim)
		for j := range v {
			v[j] = float32(r.Float64()*2 - 1)
		}
		out[i] = ports.Vector{ID: fmt.Sprintf("v%07d", i), Values: v, Payload: map[string]any{"group": fmt.Sprintf("g%d", i%2), "n": i}}
	}
	return out
}

// BenchmarkUpsert writes batches of 200 vectors of dimension 384, the
// adapter alone (the bench measures it through NATS).
func BenchmarkUpsert(b *testing.B) {
	s, err := sqlite.Open(b.Context(), sqlite.Config{Path: filepath.Join(b.TempDir(), "v.sqlite")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if err := s.CreateCollection(b.Context(), "bench", 384, ports.MetricCosine); err != nil {
		b.Fatal(err)
	}
	vs := benchVectors(20_000, 384)
	i := 0
	for b.Loop() {
		batch := vs[i%len(vs):][:200]
		i += 200
		if err := s.Upsert(b.Context(), "bench", batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(200*b.N)/b.Elapsed().Seconds(), "vectors/s")
}
