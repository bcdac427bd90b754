package wire

import (
	"encoding/json"
	"strconv"

	"github.com/abi-engine/engine/internal/strictjson"
)

// An upsert carries thousands of numbers: read by hand it costs about a
// quarter of encoding/json's reflection (BenchmarkUpsertBody). Writing it
// by hand gains nothing, as both spend their time formatting the floats.
// The same rules hold as for the other hand readers (fastjson.go): the
// plain form only, anything else is left to encoding/json. A payload is
// any JSON object, so its text is found by hand and read by encoding/json.
// The values of a body are counted as they are read, as strictjson.Values
// counts them, and a body of more than MaxValues is left to the strict
// path, which refuses it: the hand reader never builds more.

// DecodeJSON implements FastDecoder.
func (w *VecWrite) DecodeJSON(data []byte) bool {
	var out VecWrite
	if !Blank(data) {
		l := lexer{b: data, left: MaxValues - 1} // the body is one
		var seen uint8
		for more := l.open(); more; more = l.comma() {
			name, ok := l.name()
			if !ok || !l.take(1) {
				return false
			}
			switch string(name) {
			case "collection":
				out.Collection, ok = l.stringOnce(&seen, 1)
			case "vectors":
				out.Vectors, ok = l.vectors()
				ok = ok && once(&seen, 2)
			default:
				ok = false
			}
			if !ok {
				return false
			}
		}
		if !l.closed() {
			return false
		}
	}
	*w = out
	return true
}

// vectors reads an array of vectors; encoding/json gives an empty array as
// an empty slice, not nil.
func (l *lexer) vectors() ([]UpsertVector, bool) {
	if !l.next('[') {
		return nil, false
	}
	out := []UpsertVector{}
	if l.next(']') {
		return out, true
	}
	for {
		v, ok := l.vector()
		if !ok {
			return nil, false
		}
		out = append(out, v)
		if l.next(']') {
			return out, true
		}
		if !l.next(',') {
			return nil, false
		}
	}
}

// vector reads one vector object.
func (l *lexer) vector() (UpsertVector, bool) {
	var v UpsertVector
	var seen uint8
	if !l.next('{') || !l.take(1) {
		return v, false
	}
	if l.next('}') {
		return v, true
	}
	for {
		name, ok := l.name()
		if !ok || !l.take(1) {
			return v, false
		}
		switch string(name) {
		case "id":
			var s []byte
			s, ok = l.str()
			ok = ok && once(&seen, 1)
			v.ID = string(s)
		case "values":
			v.Values, ok = l.floats()
			ok = ok && once(&seen, 2)
		case "values_f32":
			v.Packed, ok = l.base64()
			ok = ok && once(&seen, 8)
		case "payload":
			v.Payload, ok = l.object()
			ok = ok && once(&seen, 4)
		default:
			ok = false
		}
		switch {
		case !ok:
			return v, false
		case l.next(','):
		case l.next('}'):
			return v, true
		default:
			return v, false
		}
	}
}

// floats reads an array of numbers as float32s, each as encoding/json
// reads one (a number out of float32's range is its error).
func (l *lexer) floats() ([]float32, bool) {
	if !l.next('[') {
		return nil, false
	}
	out := make([]float32, 0, 64)
	if l.next(']') {
		return out, true
	}
	for {
		lit, ok := l.literal()
		if !ok {
			return nil, false
		}
		f, err := strconv.ParseFloat(string(lit), 32)
		if err != nil {
			return nil, false
		}
		if l.numbers++; l.numbers%8 == 0 && !l.take(1) {
			return nil, false
		}
		out = append(out, float32(f))
		if l.next(']') {
			return out, true
		}
		if !l.next(',') {
			return nil, false
		}
	}
}

// object reads a JSON object with encoding/json, once its end is found:
// strings are skipped with their escapes, brackets counted.
func (l *lexer) object() (map[string]any, bool) {
	l.space()
	if l.i >= len(l.b) || l.b[l.i] != '{' {
		return nil, false
	}
	start, depth := l.i, 0
	for ; l.i < len(l.b); l.i++ {
		switch l.b[l.i] {
		case '"':
			for l.i++; l.i < len(l.b) && l.b[l.i] != '"'; l.i++ {
				if l.b[l.i] == '\\' {
					l.i++
				}
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				l.i++
				// A name given twice is left to the strict path, which
				// refuses it: encoding/json alone keeps the last.
				raw := l.b[start:l.i]
				var m map[string]any
				// The object itself was counted as the field's value.
				n, within := strictjson.Count(raw, &m, l.left+1)
				if !within || !l.take(n-1) || json.Unmarshal(raw, &m) != nil || strictjson.ExactFields(raw, &m) != nil {
					return nil, false
				}
				return m, true
			}
		}
	}
	return nil, false
}
