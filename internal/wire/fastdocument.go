package wire

import (
	"slices"
	"strconv"

	"github.com/abi-engine/engine/internal/strictjson"
)

// A document put is read by hand, as the other hot bodies are (see
// fastjson.go): the plain form only, anything else left to encoding/json.
// Its data is built in the same pass that reads it: strings without
// escapes, in UTF-8, numbers as float64s, no name twice in an object, and
// the values counted as strictjson.Values counts them, so the strict path's
// passes (counting, decoding, checking the names) are one here, but for a
// body of more than twice MaxValues bytes, which is counted first, as the
// strict path counts it, so that one past the bound is left to the strict
// path, which refuses it, before anything of it is built.

// deepestPlain is how deeply the hand reader of a document nests before it
// leaves the body to the strict path, which holds it to the store's bound.
const deepestPlain = 1000

// DecodeJSON implements FastDecoder. Data of null, and an if_version that
// is null or not a whole number a uint64 holds, are left to the strict
// path.
func (w *DocWrite) DecodeJSON(data []byte) bool {
	var out DocWrite
	// A body past the bound is refused by the strict path before anything
	// of it is built, having cost a pass that allocates nothing; so here.
	if strictjson.Values(data, w, MaxValues) != nil {
		return false
	}
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
			case "id":
				out.ID, ok = l.stringOnce(&seen, 2)
			case "data":
				l.space()
				if ok = l.i < len(l.b) && l.b[l.i] == '{'; ok {
					out.Data, ok = l.plainObject(1)
				}
				ok = ok && once(&seen, 4)
			case "if_version":
				var v uint64
				v, ok = l.uint64()
				ok = ok && once(&seen, 8)
				out.IfVersion = &v
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

// uint64 reads a JSON number as encoding/json reads one into a uint64:
// a whole number, with no fraction or exponent, that a uint64 holds.
func (l *lexer) uint64() (uint64, bool) {
	lit, ok := l.literal()
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseUint(string(lit), 10, 64)
	return v, err == nil
}

// plainValue reads one value in its plain form into what encoding/json
// reads it into for any. The value itself has been counted; what it holds
// is counted here.
func (l *lexer) plainValue(depth int) (any, bool) {
	l.space()
	if l.i >= len(l.b) {
		return nil, false
	}
	switch c := l.b[l.i]; {
	case c == '{':
		return l.plainObject(depth + 1)
	case c == '[':
		return l.plainArray(depth + 1)
	case c == '"':
		s, ok := l.str()
		return string(s), ok
	case c == 't':
		return true, l.word("true")
	case c == 'f':
		return false, l.word("false")
	case c == 'n':
		return nil, l.word("null")
	}
	lit, ok := l.literal()
	if !ok {
		return nil, false
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	return f, err == nil
}

// word reads the literal w.
func (l *lexer) word(w string) bool {
	if len(l.b)-l.i < len(w) || string(l.b[l.i:l.i+len(w)]) != w {
		return false
	}
	l.i += len(w)
	return true
}

// plainObject reads an object at l.i; encoding/json gives an empty one as
// an empty map, not nil. A name given twice is left to the strict path,
// which refuses it: encoding/json alone keeps the last.
func (l *lexer) plainObject(depth int) (map[string]any, bool) {
	if depth > deepestPlain || !l.next('{') {
		return nil, false
	}
	m := map[string]any{}
	if l.next('}') {
		return m, true
	}
	for {
		name, ok := l.name()
		if !ok || !l.take(1) {
			return nil, false
		}
		if _, twice := m[string(name)]; twice {
			return nil, false
		}
		v, ok := l.plainValue(depth)
		if !ok {
			return nil, false
		}
		m[string(name)] = v
		switch {
		case l.next(','):
		case l.next('}'):
			return m, true
		default:
			return nil, false
		}
	}
}

// plainArray reads an array at l.i; encoding/json gives an empty one as
// an empty slice, not nil.
func (l *lexer) plainArray(depth int) ([]any, bool) {
	if depth > deepestPlain || !l.next('[') {
		return nil, false
	}
	out := []any{}
	if l.next(']') {
		return out, true
	}
	for {
		if !l.take(1) {
			return nil, false
		}
		v, ok := l.plainValue(depth)
		if !ok {
			return nil, false
		}
		out = append(out, v)
		switch {
		case l.next(','):
		case l.next(']'):
			return out, true
		default:
			return nil, false
		}
	}
}

// The answer of a get or put, and each document of a find, is written by
// hand too: data as a store gives it back, what a JSON decoder yields
// (objects, arrays, strings, finite float64s, bools, null), is written as
// json.Marshal writes it, keys in order, and anything else, or a nesting
// past json.Marshal's check for cycles, is left to json.Marshal.

// deepestAnswer is how deeply the hand writer nests before it leaves the
// document to json.Marshal, which from there on looks for cycles.
const deepestAnswer = 1000

// appendJSON appends d as json.Marshal writes it, or reports that its data
// is not plain, having appended part of it. Marshal calls it: a Document is
// no FastEncoder, whose writer writes every value.
func (d Document) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"id":`...)
	b = appendString(b, d.ID)
	b = append(b, `,"version":`...)
	b = strconv.AppendUint(b, d.Version, 10)
	b = append(b, `,"data":`...)
	b, ok := appendObject(b, d.Data, 1)
	return append(b, '}'), ok
}

// appendObject appends m with its keys in order, as json.Marshal does.
func appendObject(b []byte, m map[string]any, depth int) ([]byte, bool) {
	if m == nil {
		return append(b, "null"...), true
	}
	if depth > deepestAnswer {
		return b, false
	}
	var few [16]string // most objects have no more keys, and keep them on the stack
	keys := few[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		var ok bool
		if b, ok = appendValue(b, m[k], depth); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

// appendValue appends v if it is plain.
func appendValue(b []byte, v any, depth int) ([]byte, bool) {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...), true
	case string:
		return appendString(b, v), true
	case float64:
		return appendFloat(b, v)
	case bool:
		return strconv.AppendBool(b, v), true
	case map[string]any:
		return appendObject(b, v, depth+1)
	case []any:
		if v == nil {
			return append(b, "null"...), true
		}
		if depth+1 > deepestAnswer {
			return b, false
		}
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = appendValue(b, e, depth+1); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	}
	return b, false
}
