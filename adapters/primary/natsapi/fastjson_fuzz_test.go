package natsapi_test

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// fastBodies makes a fresh value of every body with a hand reader.
var fastBodies = []func() wire.FastDecoder{
	func() wire.FastDecoder { return new(wire.KVKey) },
	func() wire.FastDecoder { return new(wire.KVWrite) },
	func() wire.FastDecoder { return new(wire.KVValue) },
	func() wire.FastDecoder { return new(wire.DocRef) },
	func() wire.FastDecoder { return new(wire.VecWrite) },
	func() wire.FastDecoder { return new(wire.DocWrite) },
}

// checkFastDecoders holds the hand readers to the strict decoder: what a
// hand reader takes, Decode takes with the same value, and so does
// json.Unmarshal (the facade's reader) unless the body is blank; what it
// does not take it leaves as it was.
func checkFastDecoders(t *testing.T, body []byte) {
	t.Helper()
	for _, mk := range fastBodies {
		fast, strict := mk(), mk()
		before := reflect.ValueOf(fast).Elem().Interface()
		strictErr := natsapi.Decode(body, strict)
		if strictErr != nil && !errors.Is(strictErr, ports.ErrInvalidArgument) {
			t.Fatalf("Decode(%q) into %T: %v is not a bad request", body, strict, strictErr)
		}
		if !fast.DecodeJSON(body) {
			if got := reflect.ValueOf(fast).Elem().Interface(); !reflect.DeepEqual(got, before) {
				t.Fatalf("%T.DecodeJSON(%q) declined but changed the value to %#v", fast, body, got)
			}
			continue
		}
		if strictErr != nil {
			t.Fatalf("%T.DecodeJSON(%q) took a body Decode refuses: %v", fast, body, strictErr)
		}
		if !reflect.DeepEqual(fast, strict) {
			t.Fatalf("%T from %q: hand reader %#v, Decode %#v", fast, body, fast, strict)
		}
		lenient := mk()
		err := wire.Unmarshal(body, lenient)
		viaJSON := mk()
		jsonErr := json.Unmarshal(body, viaJSON)
		if (err == nil) != (jsonErr == nil) || (err == nil && !reflect.DeepEqual(lenient, viaJSON)) {
			t.Fatalf("wire.Unmarshal(%q) into %T = %#v, %v; json.Unmarshal %#v, %v", body, lenient, lenient, err, viaJSON, jsonErr)
		}
	}
}

// FuzzFastDecoders compares the hand readers of the hot bodies with the
// strict encoding/json path on any input.
func FuzzFastDecoders(f *testing.F) {
	for _, dir := range []string{"kv", "document", "vectorstore"} {
		seeds, _ := filepath.Glob(filepath.Join("testdata", dir, "*.json"))
		for _, p := range seeds {
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Fuzz(checkFastDecoders)
}

// TestFastDecodersTakeThePlainForm makes sure the hand readers are used:
// the bodies the facade writes, and their spacing variants, are taken.
// The refused ones must be left to Decode.
func TestFastDecodersTakeThePlainForm(t *testing.T) {
	taken := map[string]wire.FastDecoder{
		`{"key":"users/42"}`:     new(wire.KVKey),
		` { "key" : "é/ü" } `:    new(wire.KVKey),
		"":                       new(wire.KVKey),
		`{}`:                     new(wire.KVKey),
		`{"key":"k","value":""}`: new(wire.KVWrite),
		`{"key":"k","value":"aGk=","ttl_seconds":1.5e3}`: new(wire.KVWrite),
		`{"ttl_seconds":-0,"value":"aGk=","key":"k"}`:    new(wire.KVWrite),
		`{"value":"MDEyMzQ1Njc4OWFiY2RlZg=="}`:           new(wire.KVValue),
		`{"collection":"users","id":"42"}`:               new(wire.DocRef),
		`{"collection":"v","vectors":[{"id":"a","values":[1,-0.5,3e-7,0],"payload":{"k":"x","n":[1,{"a":"}"}]}}]}`: new(wire.VecWrite),
		`{"vectors":[],"collection":"v"}`: new(wire.VecWrite),
		` { "collection" : "v" , "vectors" : [ { } , { "values" : [ ] , "payload" : { } } ] } `:                            new(wire.VecWrite),
		`{"collection":"v","vectors":[{"id":"a","values_f32":"AACAPwAAAMA=","payload":{"k":"x"}}]}`:                        new(wire.VecWrite),
		`{"collection":"v","vectors":[{"id":"a","values_f32":""},{"id":"b","values":[1],"values_f32":"AACAPw=="}]}`:        new(wire.VecWrite),
		`{"collection":"c","id":"d","data":{"name":"bench","n":1}}`:                                                        new(wire.DocWrite),
		` { "data" : { "a" : [ 1 , -0.5e-3 , true , false , null , "é" , [ ] , { } ] } , "if_version" : 0 , "id" : "d" } `: new(wire.DocWrite),
		`{"collection":"c","id":"d","data":{},"if_version":18446744073709551615}`:                                          new(wire.DocWrite),
		`{"collection":"c","id":"d"}`: new(wire.DocWrite),
	}
	for body, v := range taken {
		if !v.DecodeJSON([]byte(body)) {
			t.Errorf("%T.DecodeJSON(%q) = false, want the hand reader to take it", v, body)
		}
		checkFastDecoders(t, []byte(body))
	}
	declined := map[string]wire.FastDecoder{
		`{"key":"a","key":"b"}`:           new(wire.KVKey),
		`{"Key":"a"}`:                     new(wire.KVKey),
		`{"key":"a\n"}`:                   new(wire.KVKey),
		`{"key":"a"}}`:                    new(wire.KVKey),
		`{"key":"a"} {}`:                  new(wire.KVKey),
		`{"key":1}`:                       new(wire.KVKey),
		`{"key":null}`:                    new(wire.KVKey),
		`{"key":"k","value":"aGk"}`:       new(wire.KVWrite),
		`{"key":"k","ttl_seconds":1e999}`: new(wire.KVWrite),
		`{"key":"k","ttl_seconds":01}`:    new(wire.KVWrite),
		`{"key":"k","other":1}`:           new(wire.KVWrite),
		`{"key":"k"}`:                     new(wire.KVWrite),
		"{\"key\":\"\xff\"}":              new(wire.KVKey),
		"\v{}":                            new(wire.KVKey),
		`{"collection":"v","vectors":[{"id":"a","values":[1e39]}]}`:                                 new(wire.VecWrite),
		`{"collection":"v","vectors":[{"id":"a","values":[null]}]}`:                                 new(wire.VecWrite),
		`{"collection":"v","vectors":[{"id":"a","payload":null}]}`:                                  new(wire.VecWrite),
		`{"collection":"v","vectors":[{"id":"a","ID":"b"}]}`:                                        new(wire.VecWrite),
		`{"collection":"v","vectors":[{"id":"a","values":[1],"values":[2]}]}`:                       new(wire.VecWrite),
		`{"collection":"v","vectors":[{"id":"a","payload":{"k":1]}}]}`:                              new(wire.VecWrite),
		`{"collection":"v","vectors":[{"id":"a","payload":{"k":1,"k":2}}]}`:                         new(wire.VecWrite),
		`{"collection":"v","vectors":[{"id":"a","payload":{"k":{"n":1,"n":2}}}]}`:                   new(wire.VecWrite),
		`{"collection":"v","vectors":[{"id":"a"}],}`:                                                new(wire.VecWrite),
		`{"collection":"v","vectors":null}`:                                                         new(wire.VecWrite),
		`{"collection":"v","vectors":[{"id":"a","values_f32":"AACAPw="}]}`:                          new(wire.VecWrite),
		`{"collection":"v","vectors":[{"id":"a","values_f32":null}]}`:                               new(wire.VecWrite),
		`{"collection":"v","vectors":[{"id":"a","values_f32":"AACAPw==","values_f32":"AACAPw=="}]}`: new(wire.VecWrite),
		`{"collection":"c","id":"d","data":null}`:                                                   new(wire.DocWrite),
		`{"collection":"c","id":"d","data":[]}`:                                                     new(wire.DocWrite),
		`{"collection":"c","id":"d","data":{"a":1,"a":2}}`:                                          new(wire.DocWrite),
		`{"collection":"c","id":"d","data":{"a":{"b":1,"b":1}}}`:                                    new(wire.DocWrite),
		`{"collection":"c","id":"d","data":{"a":"x\u0041"}}`:                                        new(wire.DocWrite),
		`{"collection":"c","id":"d","data":{"a":1e999}}`:                                            new(wire.DocWrite),
		`{"collection":"c","id":"d","data":{"a":01}}`:                                               new(wire.DocWrite),
		`{"collection":"c","id":"d","data":{"a":tru}}`:                                              new(wire.DocWrite),
		`{"collection":"c","id":"d","data":{"a":[1,]}}`:                                             new(wire.DocWrite),
		`{"collection":"c","id":"d","data":{},"if_version":null}`:                                   new(wire.DocWrite),
		`{"collection":"c","id":"d","data":{},"if_version":1.5}`:                                    new(wire.DocWrite),
		`{"collection":"c","id":"d","data":{},"if_version":-1}`:                                     new(wire.DocWrite),
		`{"collection":"c","id":"d","data":{},"if_version":1e2}`:                                    new(wire.DocWrite),
		`{"collection":"c","id":"d","data":{},"if_version":18446744073709551616}`:                   new(wire.DocWrite),
		`{"collection":"c","id":"d","data":{},"ID":"e"}`:                                            new(wire.DocWrite),
		`{"collection":"c","id":"d","data":{},"data":{}}`:                                           new(wire.DocWrite),
		"{\"collection\":\"c\",\"id\":\"d\",\"data\":{\"\xff\":1}}":                                 new(wire.DocWrite),
	}
	for body, v := range declined {
		if v.DecodeJSON([]byte(body)) {
			t.Errorf("%T.DecodeJSON(%q) = true, want it left to Decode", v, body)
		}
		checkFastDecoders(t, []byte(body))
	}
}

// FuzzFastEncoders holds the hand writers to json.Marshal, byte for byte,
// and the hand readers to reading back what they wrote.
func FuzzFastEncoders(f *testing.F) {
	f.Add("users/42", []byte("0123456789abcdef"), 0.0, true)
	f.Add("<&>\u2028é\x00\xff", []byte(nil), 1e-7, false)
	f.Add("", []byte{}, 1e21, true)
	f.Add("k", []byte{0xff}, 123456789.125, false)
	f.Add("v", []byte{0, 0, 0x80, 0x7f, 1, 0, 0, 0, 0xbd, 0x37, 0x86, 0x35}, -0.0, true)
	f.Fuzz(func(t *testing.T, s string, b []byte, ttl float64, flag bool) {
		// Vectors take their values from ttl and b, four bytes a float32,
		// so NaNs, infinities and subnormals come up.
		values := []float32{float32(ttl)}
		for i := 0; i+4 <= len(b); i += 4 {
			values = append(values, math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))
		}
		var vectors []wire.UpsertVector
		if flag {
			vectors = []wire.UpsertVector{
				{ID: s, Values: values, Payload: map[string]any{"k": s, "n": ttl}},
				{ID: s, Packed: wire.PackFloats(values)},
				{ID: s},
			}
		}
		for _, v := range []any{
			wire.KVKey{Key: s}, wire.KVWrite{Key: s, Value: b, TTLSeconds: wire.Seconds(ttl)}, wire.KVValue{Value: b},
			wire.Set{Set: flag}, wire.Deleted{Deleted: flag}, wire.Exists{Exists: flag}, wire.Empty{},
			wire.DocRef{Collection: s, ID: s}, wire.VecWrite{Collection: s, Vectors: vectors},
		} {
			got, err := wire.Marshal(v)
			want, wantErr := json.Marshal(v)
			if (err == nil) != (wantErr == nil) || string(got) != string(want) {
				t.Fatalf("wire.Marshal(%#v) = %s, %v; json.Marshal %s, %v", v, got, err, want, wantErr)
			}
			if err == nil {
				checkFastDecoders(t, got)
			}
		}
		if math.IsNaN(ttl) {
			return
		}
		var back wire.KVWrite
		body := wire.KVWrite{Key: s, Value: b, TTLSeconds: wire.Seconds(ttl)}.AppendJSON(nil)
		if back.DecodeJSON(body) && (back.Key != s || string(back.Value) != string(b) || float64(back.TTLSeconds) != ttl) {
			t.Fatalf("KVWrite read back from %s as %#v", body, back)
		}
	})
}
