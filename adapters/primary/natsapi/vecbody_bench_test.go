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
		w.Vectors = append(w.Vectors, wire.UpsertVector{ID: fmt.Sprintf("v%07d", i), Values: v, Payload: map[string]any{"group": "g1", "n": i}})
	}
	return w
}

// packed is w with its values in the packed form the facade sends.
func packed(w wire.VecWrite) wire.VecWrite {
	out := wire.VecWrite{Collection: w.Collection}
	for _, v := range w.Vectors {
		out.Vectors = append(out.Vectors, wire.UpsertVector{ID: v.ID, Packed: wire.PackFloats(v.Values), Payload: v.Payload})
	}
	return out
}

// BenchmarkUpsertBody writes and reads an upsert body of each form: values
// as JSON numbers, read by hand and strictly with encoding/json, and
// packed (values_f32), as the facade sends it. Each reports its size.
func BenchmarkUpsertBody(b *testing.B) {
	numbers := upsertBody()
	for _, form := range []struct {
		name string
		body wire.VecWrite
	}{{"Numbers", numbers}, {"Packed", packed(numbers)}} {
		body, _ := json.Marshal(form.body)
		b.Run(form.name+"/Encode", func(b *testing.B) {
			for b.Loop() {
				if _, err := json.Marshal(form.body); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(body)), "bytes")
		})
		b.Run(form.name+"/DecodeByHand", func(b *testing.B) {
			for b.Loop() {
				var out wire.VecWrite
				if !out.DecodeJSON(body) {
					b.Fatal("declined")
				}
				for _, v := range out.Vectors {
					if _, err := v.Floats(); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		b.Run(form.name+"/DecodeStrict", func(b *testing.B) {
			for b.Loop() {
				var out wire.VecWrite
				if err := natsapi.Decode(body, &out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
