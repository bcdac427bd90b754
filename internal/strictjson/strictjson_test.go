package strictjson_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/abi-engine/engine/internal/strictjson"
)

type inner struct {
	Name string `json:"name"`
}

type Embedded struct {
	Depth int `json:"depth"`
}

type body struct {
	Embedded
	Key     string            `json:"key"`
	Inner   *inner            `json:"inner,omitempty"`
	List    []inner           `json:"list"`
	Labels  map[string]inner  `json:"labels"`
	Data    map[string]any    `json:"data"`
	At      time.Time         `json:"at"`
	Raw     json.RawMessage   `json:"raw"`
	Plain   string            // no tag: its Go name
	Skipped string            `json:"-"`
	Extra   map[string]string `json:"extra"`
}

func TestExactFields(t *testing.T) {
	for _, c := range []struct {
		data string
		err  string // "" when taken
	}{
		{`{"key":"k"}`, ""},
		{`{}`, ""},
		{`{"key":"k","inner":{"name":"n"},"list":[{"name":"a"},{"name":"b"}],"labels":{"x":{"name":"y"}}}`, ""},
		{`{"depth":2,"Plain":"p","at":"2026-12-06T00:00:00Z","raw":{"K":1,"k":2}}`, ""},
		{`{"data":{"Key":1,"key":{"KEY":[1,2]}}}`, ""},
		{`{"KEY":"k"}`, `unknown field "KEY"`},
		{`{"Key":"k"}`, `unknown field "Key"`},
		{`{"plain":"p"}`, `unknown field "plain"`},
		{`{"inner":{"Name":"n"}}`, `unknown field "inner.Name"`},
		{`{"list":[{"name":"a"},{"NAME":"b"}]}`, `unknown field "list[1].NAME"`},
		{`{"labels":{"x":{"nAme":"y"}}}`, `unknown field "labels.x.nAme"`},
		{`{"Depth":1}`, `unknown field "Depth"`},
		{`{"key":"a","key":"b"}`, `field "key" given twice`},
		{`{"inner":{"name":"a","name":"b"}}`, `field "inner.name" given twice`},
		{`{"data":{"a":1,"a":2}}`, `field "data.a" given twice`},
		{`{"extra":{"a":"1","b":"2","a":"3"}}`, `field "extra.a" given twice`},
		{`{"key":"\ud83d\ude00 \u00e9 \\ud800"}`, ""},
		{"{\"key\":\"\xff\"}", `field "key" is not UTF-8`},
		{`{"key":"a\ud800"}`, `field "key" is not UTF-8`},
		{`{"key":"a\ud800\u0041"}`, `field "key" is not UTF-8`},
		{`{"key":"a\ud800\ud800\udc00"}`, `field "key" is not UTF-8`},
		{`{"key":"\uDC00b"}`, `field "key" is not UTF-8`},
		{"{\"list\":[{\"name\":\"ok\"},{\"name\":\"\xed\xa0\x80\"}]}", `field "list[1].name" is not UTF-8`},
		{`{"data":{"x":["\ud800"]}}`, `field "data.x[0]" is not UTF-8`},
		{"{\"data\":{\"\xff\":1}}", `field name "data.\xff" is not UTF-8`},
	} {
		var v body
		if err := json.Unmarshal([]byte(c.data), &v); err != nil {
			t.Fatalf("%s does not decode at all: %v", c.data, err)
		}
		err := strictjson.ExactFields([]byte(c.data), &v)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v, want it taken", c.data, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: %v, want %q", c.data, err, c.err)
		}
	}
}

// FuzzExactFields reads any body that encoding/json decodes: it never
// panics, and a body it takes is UTF-8 and names, at its top level, only
// the type's fields, each once and spelt as the type spells it.
func FuzzExactFields(f *testing.F) {
	for _, s := range []string{`{"key":"k"}`, `{"KEY":"k"}`, `{"key":"a","key":"b"}`, `{"list":[{"name":"a"}],"data":{"x":[1,{"y":2}]}}`, `{"labels":{"x":{"name":"y"}}}`, "{\"key\":\"\xff\"}", `{"data":{"x":"\ud800"}}`} {
		f.Add([]byte(s))
	}
	known := map[string]bool{"depth": true, "key": true, "inner": true, "list": true, "labels": true, "data": true, "at": true, "raw": true, "Plain": true, "extra": true}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v body
		if json.Unmarshal(data, &v) != nil {
			return
		}
		if strictjson.ExactFields(data, &v) != nil {
			return
		}
		if !utf8.Valid(data) {
			t.Fatalf("%q taken, though it is not UTF-8", data)
		}
		dec := json.NewDecoder(strings.NewReader(string(data)))
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			return // null: nothing to name
		}
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				t.Fatal(err)
			}
			name := tok.(string)
			if !known[name] || seen[name] {
				t.Fatalf("%s taken, though it names %q (known: %v, twice: %v)", data, name, known[name], seen[name])
			}
			seen[name] = true
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				t.Fatal(err)
			}
		}
	})
}

type deep struct {
	X inner `json:"x"`
}
type Shallow struct {
	Y map[string]int `json:"x"`
}
type Deeper struct{ deep }
type clash struct {
	Deeper
	Shallow
}

// Of two embedded fields of one name, the shallower is the one
// encoding/json fills, and so the one the body is held to.
func TestTheShallowerOfTwoEmbeddedFieldsIsTheOneChecked(t *testing.T) {
	data := []byte(`{"x":{"anything":1}}`)
	var v clash
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("encoding/json refuses it: %v", err)
	}
	if err := strictjson.ExactFields(data, &v); err != nil {
		t.Fatalf("ExactFields: %v", err)
	}
}

// Escaped names are read as encoding/json reads them; a value's bytes are
// stepped over, escapes included.
func TestEscapesAreReadAsEncodingJSONReadsThem(t *testing.T) {
	for data, want := range map[string]string{
		`{"\u006bey":"k"}`:             "",
		`{"key":"a\"b","key2":1}`:      `unknown field "key2"`,
		`{"key":"k","\u006bey":"k"}`:   `field "key" given twice`,
		`{"data":{"a\"b":1,"a\"b":2}}`: `field "data.a\"b" given twice`,
	} {
		var v body
		if err := json.Unmarshal([]byte(data), &v); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		err := strictjson.ExactFields([]byte(data), &v)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", data, err, want)
		}
	}
}

// A large value costs one pass and no copy.
func BenchmarkExactFieldsOfALargeValue(b *testing.B) {
	data := []byte(`{"key":"k","data":{"v":"` + strings.Repeat("x", 16<<20) + `"}}`)
	var v body
	if err := json.Unmarshal(data, &v); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := strictjson.ExactFields(data, &v); err != nil {
			b.Fatal(err)
		}
	}
}

// A body of many small objects, as a document of records is, costs its
// pass and nothing on the heap for each object.
func BenchmarkExactFieldsOfManyObjects(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"key":"k","data":{"records":[`)
	for i := range 200 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"id":"r%05d","name":"a record","n":%d,"ok":%t,"tags":["x","y"]}`, i, i, i%2 == 0)
	}
	sb.WriteString(`]}}`)
	data := []byte(sb.String())
	var v body
	if err := json.Unmarshal(data, &v); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := strictjson.ExactFields(data, &v); err != nil {
			b.Fatal(err)
		}
	}
}

// What json.Marshal writes from text that is not UTF-8, at any depth, is
// refused by Marshaled, naming the field; what it writes from UTF-8 text
// is taken, U+FFFD and escaped HTML included. A json.RawMessage is copied
// as it is, so its lone surrogate escapes are refused too.
func TestMarshaledRefusesTextThatWasNotUTF8(t *testing.T) {
	for _, c := range []struct {
		v    any
		want string
	}{
		{map[string]any{"a": "x", "b": []any{"<&>", "\ufffd", `\ufffd`, "\u2028"}}, ""},
		{map[string]any{"\ufffd": map[string]any{"é": 1.0}}, ""},
		{map[string]any{"a": "x\xff"}, `field "a" is not UTF-8`},
		{map[string]any{"a": map[string]any{"b": []any{"ok", "\xed\xa0\x80"}}}, `field "a.b[1]" is not UTF-8`},
		{map[string]any{"a": map[string]any{"b\xff": 1}}, `field name "a.b\\ufffd" is not UTF-8`},
		{map[string]any{"a": []string{"caf\xc3"}}, `field "a[0]" is not UTF-8`},
		{"\xff", "a string is not UTF-8"},
		{map[string]any{"a": json.RawMessage(`{"b":"\ud800"}`)}, `field "a.b" is not UTF-8`},
		{map[string]any{"a": json.RawMessage("\"\xff\"")}, `field "a" is not UTF-8`},
	} {
		data, err := json.Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		err = strictjson.Marshaled(data)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("Marshaled(%s): %v, want %q", data, err, c.want)
		}
	}
}

// FuzzMarshaled holds Marshaled to what json.Marshal makes of a string, as
// a value and as a name at some depth: taken exactly when it is UTF-8.
func FuzzMarshaled(f *testing.F) {
	for _, s := range []string{"", "plain", "<a&b>", "\ufffd", "\xff", "a\xed\xa0\x80", `\ufffd`, "\\\xff", "\u2028\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, v := range []any{s, map[string]any{"v": s}, map[string]any{s: []any{1.0}}, map[string]any{"o": []any{map[string]string{s: s}}}} {
			data, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			if err := strictjson.Marshaled(data); (err == nil) != utf8.ValidString(s) {
				t.Fatalf("Marshaled(%s) = %v, though the text %q is UTF-8: %v", data, err, s, utf8.ValidString(s))
			}
		}
	})
}

// What follows a value is named as Rest names it, though json.Unmarshal
// refuses it as a syntax error.
func TestUnmarshalNamesWhatFollowsTheValue(t *testing.T) {
	for data, want := range map[string]string{
		`{"key":"k"}]`:       `"]" after the JSON value`,
		`{"key":"k"}  }}`:    `"}}" after the JSON value`,
		`{"key":"k"} {}`:     `more than one JSON value`,
		`{"key":"k"}` + "x":  `more than one JSON value`,
		`{"key":"k"}` + "\n": ``,
	} {
		var b body
		err := strictjson.Unmarshal([]byte(data), &b)
		if (want == "" && err != nil) || (want != "" && (err == nil || err.Error() != want)) {
			t.Errorf("Unmarshal(%q) = %v, want %q", data, err, want)
		}
		if want == "" && b.Key != "k" {
			t.Errorf("Unmarshal(%q) read key %q", data, b.Key)
		}
	}
}
