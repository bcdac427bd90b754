package wire

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"
)

// The hottest bodies (a keyvalue get, set and their answers, a document
// get, and a document put, read only) are read and written by hand,
// without reflection. Each hand reader
// takes only the plain form of its body: the exact lowercase field names,
// each at most once, strings without escapes, values of the right type,
// nothing after the object but white space. Anything else it leaves to
// encoding/json by reporting false, so every refusal, and its message,
// stays encoding/json's. FuzzFastDecoders holds that whatever a hand
// reader accepts, encoding/json accepts with the same value.

// FastDecoder is a body with a hand reader. DecodeJSON reports whether it
// read data; on false the receiver is unchanged and the caller decodes
// with encoding/json.
type FastDecoder interface {
	DecodeJSON(data []byte) bool
}

// FastEncoder is a body with a hand writer. AppendJSON appends exactly
// what json.Marshal would write.
type FastEncoder interface {
	AppendJSON(b []byte) []byte
}

// Blank reports whether a body is empty or JSON white space only (space,
// tab, CR, LF): the strict decoder and the hand readers take it for an
// empty object, json.Unmarshal refuses it. Other white space (a vertical
// tab, a form feed, U+00A0) is no JSON at all, and no empty body either.
func Blank(data []byte) bool {
	for _, c := range data {
		switch c {
		case ' ', '\t', '\r', '\n':
		default:
			return false
		}
	}
	return true
}

// lexer walks a body in its plain form.
type lexer struct {
	b    []byte
	i    int
	done bool // the closing brace of the object was read
	// left is how many more values a body that can hold many (an
	// upsert) may hold, counted down from MaxValues, and numbers how many
	// numbers of its vectors it has read, of which every eighth counts;
	// the other hand readers take a few fields only, and leave them alone.
	left    int
	numbers int
}

// take counts n values against l.left, and reports whether they fit.
func (l *lexer) take(n int) bool {
	l.left -= n
	return l.left >= 0
}

// space skips JSON white space.
func (l *lexer) space() {
	for l.i < len(l.b) {
		switch l.b[l.i] {
		case ' ', '\t', '\n', '\r':
			l.i++
		default:
			return
		}
	}
}

// next consumes c after white space.
func (l *lexer) next(c byte) bool {
	l.space()
	if l.i < len(l.b) && l.b[l.i] == c {
		l.i++
		return true
	}
	return false
}

// end reports whether only white space is left.
func (l *lexer) end() bool {
	l.space()
	return l.i == len(l.b)
}

// str reads a string without escapes or control characters, in valid
// UTF-8, and returns its bytes (a view into the body).
func (l *lexer) str() ([]byte, bool) {
	if !l.next('"') {
		return nil, false
	}
	start := l.i
	ascii := true
	for l.i < len(l.b) {
		c := l.b[l.i]
		switch {
		case c == '"':
			s := l.b[start:l.i]
			l.i++
			return s, ascii || utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
		l.i++
	}
	return nil, false
}

// seconds reads a JSON number as Seconds does: one that is not 0 but
// that a float64 holds as 0 is not taken.
func (l *lexer) seconds() (Seconds, bool) {
	lit, ok := l.literal()
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	return Seconds(f), err == nil && (f != 0 || !notZero(lit))
}

// literal reads the text of a JSON number.
func (l *lexer) literal() ([]byte, bool) {
	l.space()
	start := l.i
	if l.i < len(l.b) && l.b[l.i] == '-' {
		l.i++
	}
	switch {
	case l.i < len(l.b) && l.b[l.i] == '0':
		l.i++
	case l.i < len(l.b) && l.b[l.i] >= '1' && l.b[l.i] <= '9':
		l.digits()
	default:
		return nil, false
	}
	if l.i < len(l.b) && l.b[l.i] == '.' {
		l.i++
		if !l.digits() {
			return nil, false
		}
	}
	if l.i < len(l.b) && (l.b[l.i] == 'e' || l.b[l.i] == 'E') {
		l.i++
		if l.i < len(l.b) && (l.b[l.i] == '+' || l.b[l.i] == '-') {
			l.i++
		}
		if !l.digits() {
			return nil, false
		}
	}
	return l.b[start:l.i], true
}

// digits reads one or more decimal digits.
func (l *lexer) digits() bool {
	start := l.i
	for l.i < len(l.b) && l.b[l.i] >= '0' && l.b[l.i] <= '9' {
		l.i++
	}
	return l.i > start
}

// base64 reads a string of standard base64, as []byte decodes in
// encoding/json: never nil, even when empty.
func (l *lexer) base64() (Bytes, bool) {
	s, ok := l.str()
	if !ok {
		return nil, false
	}
	out := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
	n, err := base64.StdEncoding.Decode(out, s)
	return out[:n], err == nil
}

// An object in its plain form is read as
//
//	l := lexer{b: data}
//	for more := l.open(); more; more = l.comma() {
//		name, ok := l.name() ... read the value
//	}
//	return l.closed()
//
// without closures, so that nothing of it escapes to the heap.

// open reads the opening brace and reports whether a field follows; an
// empty object leaves l closed.
func (l *lexer) open() bool {
	if !l.next('{') {
		return false
	}
	if l.next('}') {
		l.done = true
		return false
	}
	return true
}

// name reads a field's name and its colon.
func (l *lexer) name() ([]byte, bool) {
	n, ok := l.str()
	return n, ok && l.next(':')
}

// comma reads what follows a value: a comma (another field follows) or
// the closing brace.
func (l *lexer) comma() bool {
	if l.next(',') {
		return true
	}
	if l.next('}') {
		l.done = true
	}
	return false
}

// closed reports whether the object ended properly with nothing after it
// but white space.
func (l *lexer) closed() bool { return l.done && l.end() }

// stringOnce reads a field's string value, and records bit in seen as
// once does: false if the value is no plain string or the name came before.
func (l *lexer) stringOnce(seen *uint8, bit uint8) (string, bool) {
	s, ok := l.str()
	if !ok || !once(seen, bit) {
		return "", false
	}
	return string(s), true
}

// once records bit in seen and reports whether it was not already there:
// a name twice is left to encoding/json.
func once(seen *uint8, bit uint8) bool {
	if *seen&bit != 0 {
		return false
	}
	*seen |= bit
	return true
}

// DecodeJSON implements FastDecoder.
func (k *KVKey) DecodeJSON(data []byte) bool {
	var out KVKey
	if !Blank(data) {
		l := lexer{b: data}
		var seen uint8
		for more := l.open(); more; more = l.comma() {
			name, ok := l.name()
			if !ok || string(name) != "key" || !once(&seen, 1) {
				return false
			}
			s, ok := l.str()
			if !ok {
				return false
			}
			out.Key = string(s)
		}
		if !l.closed() {
			return false
		}
	}
	*k = out
	return true
}

// DecodeJSON implements FastDecoder. A body without value, blank ones
// included, is left to the strict path, which refuses it.
func (w *KVWrite) DecodeJSON(data []byte) bool {
	var out KVWrite
	var seen uint8
	if !Blank(data) {
		l := lexer{b: data}
		for more := l.open(); more; more = l.comma() {
			name, ok := l.name()
			if !ok {
				return false
			}
			switch string(name) {
			case "key":
				var s []byte
				s, ok = l.str()
				ok = ok && once(&seen, 1)
				out.Key = string(s)
			case "value":
				out.Value, ok = l.base64()
				ok = ok && once(&seen, 2)
			case "ttl_seconds":
				out.TTLSeconds, ok = l.seconds()
				ok = ok && once(&seen, 4)
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
	if seen&2 == 0 {
		return false
	}
	*w = out
	return true
}

// DecodeJSON implements FastDecoder.
func (v *KVValue) DecodeJSON(data []byte) bool {
	var out KVValue
	if !Blank(data) {
		l := lexer{b: data}
		var seen uint8
		for more := l.open(); more; more = l.comma() {
			name, ok := l.name()
			if !ok || string(name) != "value" || !once(&seen, 1) {
				return false
			}
			if out.Value, ok = l.base64(); !ok {
				return false
			}
		}
		if !l.closed() {
			return false
		}
	}
	*v = out
	return true
}

// DecodeJSON implements FastDecoder.
func (r *DocRef) DecodeJSON(data []byte) bool {
	var out DocRef
	if !Blank(data) {
		l := lexer{b: data}
		var seen uint8
		for more := l.open(); more; more = l.comma() {
			name, ok := l.name()
			if !ok {
				return false
			}
			switch string(name) {
			case "collection":
				out.Collection, ok = l.stringOnce(&seen, 1)
			case "id":
				out.ID, ok = l.stringOnce(&seen, 2)
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
	*r = out
	return true
}

// appendString appends s as json.Marshal writes it: the common plain
// ASCII by hand, anything it would escape through json.Marshal itself.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendBytes appends v as json.Marshal writes a []byte: base64, or null.
func appendBytes(b []byte, v []byte) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = base64.StdEncoding.AppendEncode(b, v)
	return append(b, '"')
}

// appendFloat appends f as json.Marshal writes a float64, which it cannot
// for NaN or an infinity; ok is false then.
func appendFloat(b []byte, f float64) ([]byte, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return b, false
	}
	format := byte('f')
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// encoding/json writes 1e-07 as 1e-7.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}

// AppendJSON implements FastEncoder.
func (k KVKey) AppendJSON(b []byte) []byte {
	b = append(b, `{"key":`...)
	b = appendString(b, k.Key)
	return append(b, '}')
}

// AppendJSON implements FastEncoder for a finite TTL; Marshal leaves a NaN
// or infinite one to json.Marshal, which refuses it.
func (w KVWrite) AppendJSON(b []byte) []byte {
	b = append(b, `{"key":`...)
	b = appendString(b, w.Key)
	b = append(b, `,"value":`...)
	b = appendBytes(b, w.Value)
	if w.TTLSeconds != 0 {
		b = append(b, `,"ttl_seconds":`...)
		b, _ = appendFloat(b, float64(w.TTLSeconds))
	}
	return append(b, '}')
}

// AppendJSON implements FastEncoder.
func (v KVValue) AppendJSON(b []byte) []byte {
	b = append(b, `{"value":`...)
	b = appendBytes(b, v.Value)
	return append(b, '}')
}

// AppendJSON implements FastEncoder.
func (s Set) AppendJSON(b []byte) []byte {
	return append(strconv.AppendBool(append(b, `{"set":`...), s.Set), '}')
}

// AppendJSON implements FastEncoder.
func (d Deleted) AppendJSON(b []byte) []byte {
	return append(strconv.AppendBool(append(b, `{"deleted":`...), d.Deleted), '}')
}

// AppendJSON implements FastEncoder.
func (e Exists) AppendJSON(b []byte) []byte {
	return append(strconv.AppendBool(append(b, `{"exists":`...), e.Exists), '}')
}

// AppendJSON implements FastEncoder.
func (Empty) AppendJSON(b []byte) []byte { return append(b, "{}"...) }

// AppendJSON implements FastEncoder.
func (r DocRef) AppendJSON(b []byte) []byte {
	b = append(b, `{"collection":`...)
	b = appendString(b, r.Collection)
	b = append(b, `,"id":`...)
	b = appendString(b, r.ID)
	return append(b, '}')
}

// Marshal is json.Marshal, by hand for a FastEncoder and for a Document
// whose data is plain.
func Marshal(v any) ([]byte, error) {
	if d, ok := v.(Document); ok {
		if b, ok := d.appendJSON(make([]byte, 0, 256)); ok {
			return b, nil
		}
		return json.Marshal(v)
	}
	if e, ok := v.(FastEncoder); ok && encodable(v) {
		return e.AppendJSON(make([]byte, 0, 64)), nil
	}
	return json.Marshal(v)
}

// encodable is false for the one FastEncoder json.Marshal refuses: a
// write whose TTL is NaN or infinite, so that Marshal fails as it would.
func encodable(v any) bool {
	w, ok := v.(KVWrite)
	return !ok || (!math.IsNaN(float64(w.TTLSeconds)) && !math.IsInf(float64(w.TTLSeconds), 0))
}

// Unmarshal is json.Unmarshal, by hand for a FastDecoder whose hand reader
// takes data. A blank body, which a hand reader takes for an empty object
// as the strict decoder does, is json.Unmarshal's error.
func Unmarshal(data []byte, v any) error {
	if d, ok := v.(FastDecoder); ok && !Blank(data) && d.DecodeJSON(data) {
		return nil
	}
	return json.Unmarshal(data, v)
}
