package natsapi_test

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/abi-engine/engine/internal/wire"
)

// TestADocumentAnswerIsWrittenByteForByteAsJSONWritesIt holds the hand
// writer of a document get's or put's answer, and of each document of a
// find's, to json.Marshal over many documents: plain data of every shape a
// store gives back, with the strings and numbers json.Marshal writes
// specially, and data that is not plain, which json.Marshal writes or
// refuses as it did.
func TestADocumentAnswerIsWrittenByteForByteAsJSONWritesIt(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		data, _ := randomValue(r, 0).(map[string]any)
		if data == nil {
			data = map[string]any{"v": randomValue(r, 3)}
		}
		requireSameAnswer(t, wire.Document{ID: randomString(r), Version: r.Uint64() >> uint(r.IntN(64)), Data: data})
		if i%500 == 0 {
			t.Logf("document %d: %d bytes", i, len(mustMarshal(t, data)))
		}
	}
	for _, data := range []map[string]any{
		nil,
		{},
		{"nan": math.NaN()},
		{"deep": []any{map[string]any{"inf": math.Inf(-1)}}},
		{"int": 1, "i64": int64(-3), "u": uint8(7)},
		{"num": json.Number("12.50")},
		{"strings": []string{"a", "<b>"}},
		{"typed": map[string]string{"z": "1", "a": "2"}},
		{"when": time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)},
		{"raw": json.RawMessage(`{"b":1, "a":2}`)},
		{"f32": float32(0.1)},
		{"nilmap": map[string]any(nil), "nilslice": []any(nil), "empty": []any{}},
		{"plain then not": []any{1.5, "x", map[string]any{"a": true}, 2}},
		{"deepest": nested(2000)},
		{"under": nested(990)},
	} {
		requireSameAnswer(t, wire.Document{ID: "d", Version: 1, Data: data})
	}
}

// FuzzDocumentAnswer reads each input as a store reads stored data back
// and holds the hand writer of the answer to json.Marshal.
func FuzzDocumentAnswer(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "document", "*.json"))
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "d1", uint64(1))
	}
	f.Add([]byte(`{"a":"<&>\u2028\u0000é","b":[1e-7,1e21,-0,123456789.125,null,true,{}],"":{"\u00ff":[]}}`), "<id>", uint64(math.MaxUint64))
	f.Add([]byte("{\"x\":\"\xff\xfe\"}"), "\xff", uint64(0))
	f.Fuzz(func(t *testing.T, text []byte, id string, version uint64) {
		var data map[string]any
		if json.Unmarshal(text, &data) != nil {
			data = map[string]any{"text": string(text)}
		}
		requireSameAnswer(t, wire.Document{ID: id, Version: version, Data: data})
	})
}

func requireSameAnswer(t *testing.T, d wire.Document) {
	t.Helper()
	got, err := wire.Marshal(d)
	want, wantErr := json.Marshal(d)
	if (err == nil) != (wantErr == nil) || string(got) != string(want) {
		t.Fatalf("wire.Marshal(%#v) = %q, %v; json.Marshal %q, %v", d, got, err, want, wantErr)
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// nested is data n objects deep.
func nested(n int) map[string]any {
	m := map[string]any{"leaf": "x"}
	for range n - 1 {
		m = map[string]any{"in": m}
	}
	return m
}

// randomValue is a value as a JSON decoder yields it: an object more often
// near the top.
func randomValue(r *rand.Rand, depth int) any {
	kind := r.IntN(8)
	if depth == 0 {
		kind = 6
	} else if depth > 5 {
		kind = r.IntN(5)
	}
	switch kind {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 0
	case 2:
		return randomString(r)
	case 3, 4:
		return randomFloat(r)
	case 5:
		a := make([]any, r.IntN(6))
		for i := range a {
			a[i] = randomValue(r, depth+1)
		}
		return a
	default:
		m := make(map[string]any)
		for range r.IntN(8) {
			m[randomString(r)] = randomValue(r, depth+1)
		}
		return m
	}
}

var stringParts = []string{"a", "name", "é", "日本", "<", ">", "&", "\"", "\\", "/", "\u2028", "\u2029", "\x00", "\x1f", "\t", "\n", "\xff", "\xe2\x82", "😀", " ", "\u007f", "\ufffd"}

func randomString(r *rand.Rand) string {
	var b strings.Builder
	for range r.IntN(6) {
		b.WriteString(stringParts[r.IntN(len(stringParts))])
	}
	return b.String()
}

func randomFloat(r *rand.Rand) float64 {
	switch r.IntN(8) {
	case 0:
		return float64(r.IntN(2000) - 1000)
	case 1:
		return math.Copysign(0, -1)
	case 2:
		return math.Float64frombits(r.Uint64() &^ (0x7ff << 52)) // subnormal or zero
	case 3:
		return []float64{1e-7, 1e-6, 1e21, 1e20, 9.999999999999999e20, 123456789.125, math.MaxFloat64, math.SmallestNonzeroFloat64, 1 << 53, -1e-300}[r.IntN(10)]
	default:
		f := math.Float64frombits(r.Uint64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return 0.5
		}
		return f
	}
}
