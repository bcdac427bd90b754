package natsapi_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/internal/wire"
)

// upsertBody is a batch of 200 vectors of dimension 384, as the bench
// sends them.
func upsertBody() wire.VecWrite {
	r := rand.New(rand.NewPCG(1, 2))
	w := wire.VecWrite{Collection: "bench"}
	for i := range 200 {
		v := make([]float32, 384)
		for j := range v {
			v[j] = float32(r.Float64()*2 - 1)
		}
		w.Vectors = append(w.Vectors, wire.Vector{ID: fmt.Sprintf("v%07d", i), Values: v, Payload: map[string]any{"group": "g1", "n": i}})
	}
	return w
}

// BenchmarkUpsertBody reads an upsert body by hand and strictly with
// encoding/json.
func BenchmarkUpsertBody(b *testing.B) {
	w := upsertBody()
	body, _ := json.Marshal(w)
	b.Run("DecodeByHand", func(b *testing.B) {
		for b.Loop() {
			var out wire.VecWrite
			if !out.DecodeJSON(body) {
				b.Fatal("declined")
			}
		}
	})
	b.Run("DecodeStrict", func(b *testing.B) {
		for b.Loop() {
			var out wire.VecWrite
			if err := natsapi.Decode(body, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
}
