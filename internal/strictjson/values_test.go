package strictjson_test

import (
	"strings"
	"testing"

	"github.com/abi-engine/engine/internal/strictjson"
)

type vector struct {
	ID      string         `json:"id"`
	Values  []float32      `json:"values"`
	Payload map[string]any `json:"payload"`
}

type batch struct {
	Vectors []vector `json:"vectors"`
}

func TestCountCountsEveryValueAndEveryEighthNumberOfANumberArray(t *testing.T) {
	for _, c := range []struct {
		data string
		v    any
		want int
	}{
		{`{}`, &body{}, 1},
		{`{"key":"k"}`, &body{}, 2},
		{`{"data":{"a":[1,"x",true,null,{},[]],"b":{"c":0}}}`, &body{}, 11},
		{`{"vectors":[{"id":"a","values":[1,2,3.5,-4e-2],"payload":{"k":[1,2]}}]}`, &batch{}, 9},
		// A name it does not take reads as any: its numbers count.
		{`{"vectors":[{"id":"a","VALUES":[1,2,3]}]}`, &batch{}, 8},
		// A name escaped is the name it spells.
		{`{"vectors":[{"v\u0061lues":[1,2,3]}]}`, &batch{}, 4},
		// What is not a number in a number array counts.
		{`{"vectors":[{"values":[1,{},"x"]}]}`, &batch{}, 6},
		{`[1,2,3]`, new([]float64), 1},
		{`[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]`, new([]float64), 3},
		{`[[1,2,3,4,5,6,7],[8,9]]`, new([][]float32), 4},
		{`[1,2,3]`, new([]any), 4},
		{`"s"`, new(any), 1},
		{`  `, new(any), 0},
	} {
		if got, within := strictjson.Count([]byte(c.data), c.v, 1000); got != c.want || !within {
			t.Errorf("Count(%s) = %d, %v, want %d", c.data, got, within, c.want)
		}
		if c.want > 0 {
			if _, within := strictjson.Count([]byte(c.data), c.v, c.want-1); within {
				t.Errorf("Count(%s) with a bound of %d is within it, holding %d", c.data, c.want-1, c.want)
			}
			if err := strictjson.Values([]byte(c.data), c.v, c.want-1); err == nil || !strings.Contains(err.Error(), "JSON values") {
				t.Errorf("Values(%s) with a bound of %d = %v, want the bound named", c.data, c.want-1, err)
			}
		}
	}
}

// Text that is not JSON is walked to its end, whatever it holds, and left
// to the decoder to refuse; nesting past encoding/json's own limit is not
// looked into.
func TestCountEndsOnAnyText(t *testing.T) {
	for _, data := range []string{
		`[}`, `{]`, `{"a":}`, `{"a"`, `[1,`, `"unterminated`, `"\`, `{:::}`, `]]]]`, `}}}}`, `{"a":1 "b":2}`,
		`[` + strings.Repeat(`{"a":[`, 20000), strings.Repeat(`[`, 30000) + strings.Repeat(`]`, 30000),
	} {
		for _, v := range []any{new(any), &body{}, &batch{}} {
			strictjson.Count([]byte(data), v, 1<<20)
		}
	}
}

// Values leaves a body of no more than twice its bound in bytes uncounted:
// no JSON text that short holds more values than the bound. The densest
// shapes, at the bound and one byte past it, show the edge is exact.
func TestValuesCountsOnlyABodyLongerThanTwiceItsBound(t *testing.T) {
	const most = 50
	dense := map[string]func(n int) string{
		"numbers":       func(n int) string { return "[" + strings.Repeat("0,", n-2) + "0]" },
		"empty arrays":  func(n int) string { return "[" + strings.Repeat("[],", n-2) + "[]]" },
		"nested arrays": func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) },
		"empty strings": func(n int) string { return "[" + strings.Repeat(`"",`, n-2) + `""]` },
	}
	for name, body := range dense {
		for n := 2; len(body(n)) <= 2*most; n++ {
			if got, within := strictjson.Count([]byte(body(n)), new(any), most); !within {
				t.Fatalf("%s: %d bytes held %d values, more than %d, within twice the bound in bytes", name, len(body(n)), got, most)
			}
		}
	}
	past := "[" + strings.Repeat("0,", most-1) + "0]" // most+1 values in 2*most+1 bytes
	if len(past) != 2*most+1 {
		t.Fatalf("the body past the edge is %d bytes, want %d", len(past), 2*most+1)
	}
	if err := strictjson.Values([]byte(past), new(any), most); err == nil {
		t.Fatalf("%d values in %d bytes passed a bound of %d", most+1, len(past), most)
	}
}
