package wire

import (
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
			var s []byte
			switch string(name) {
			case "collection":
				s, ok = l.str()
				ok = ok && once(&seen, 1)
				out.Collection = string(s)
			case "id":
				s, ok = l.str()
				ok = ok && once(&seen, 2)
				out.ID = string(s)
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
