// Package strictjson holds a JSON body to the letter of a protocol where
// encoding/json is lenient.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"
)

// ExactFields checks what encoding/json lets through on the way into v's
// type: a field name that matches one of the type's only when case is
// ignored ("KEY" for "key"); a name given twice in one object, of which
// encoding/json keeps the last; and a string or name that is not UTF-8,
// a byte outside it or an escaped surrogate half without its pair
// ("\ud800"), which encoding/json reads as U+FFFD, so that "a\xff" and
// "a\ud800" would both name the key "a\ufffd". The protocol takes none of
// these; nor null for a field tagged strictjson:"notnull". data must be JSON that decoded into v without error. Values of a type that reads
// itself (json.Unmarshaler) and of interface type are not looked into,
// except that their objects may not repeat a name either.
//
// It reads data in place: strings are stepped over, not copied, so a body
// of large values costs no more than one pass.
func ExactFields(data []byte, v any) error {
	t := reflect.TypeOf(v)
	if t == nil {
		return nil
	}
	s := &scanner{b: data}
	if err := s.value(t); err != nil {
		if p, ok := err.(*pathError); ok {
			return p.done()
		}
		return err
	}
	return nil
}

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

// Marshaled checks what json.Marshal wrote from a Go value for text the
// value held that is not UTF-8, and reports it as ExactFields does, naming
// the field. json.Marshal writes each byte of a string or map key that is
// not UTF-8 as the escape \ufffd, and copies what a json.RawMessage or a
// json.Marshaler wrote as it is, where a byte outside UTF-8 or an escaped
// surrogate half without its pair may stand: read back, each of these is
// U+FFFD, text the caller never gave. So a \ufffd escape is refused too;
// json.Marshal writes the character itself unescaped. A body without a
// \u escape, in UTF-8, which is nearly every one, costs one pass.
func Marshaled(data []byte) error {
	if utf8.Valid(data) && !bytes.Contains(data, []byte(`\u`)) {
		return nil
	}
	s := &scanner{b: data, marshaled: true}
	if err := s.value(nil); err != nil {
		if p, ok := err.(*pathError); ok {
			return p.done()
		}
		return err
	}
	return nil
}

// scanner walks JSON that is known to be valid.
type scanner struct {
	b []byte
	i int
	// marshaled takes the escape \ufffd for a byte json.Marshal found
	// outside UTF-8, and leaves names given twice to the JSON's writer.
	marshaled bool
}

// pathError is a refusal, with the path to its field built on the way out.
type pathError struct {
	path []string // innermost first
	what string   // "unknown field", "given twice", "name not UTF-8" or "not UTF-8"
}

func (p *pathError) Error() string { return p.done().Error() }

func (p *pathError) done() error {
	var b strings.Builder
	for i := len(p.path) - 1; i >= 0; i-- {
		seg := p.path[i]
		if b.Len() > 0 && !strings.HasPrefix(seg, "[") {
			b.WriteByte('.')
		}
		b.WriteString(seg)
	}
	switch p.what {
	case "given twice":
		return fmt.Errorf("field %q given twice", b.String())
	case "null":
		return fmt.Errorf("field %q is null, which it may not be: give a value or leave the field out", b.String())
	case "name not UTF-8":
		return fmt.Errorf("field name %q is not UTF-8 (a byte outside it, or an escaped surrogate half without its pair)", b.String())
	case "not UTF-8":
		if b.Len() == 0 {
			return errors.New("a string is not UTF-8 (a byte outside it, or an escaped surrogate half without its pair)")
		}
		return fmt.Errorf("field %q is not UTF-8 (a byte outside it, or an escaped surrogate half without its pair)", b.String())
	}
	return fmt.Errorf("%s %q", p.what, b.String())
}

func (s *scanner) space() { s.i = space(s.b, s.i) }

// space is where the JSON whitespace in b from i ends.
func space(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// str steps over the string at s.i and returns what lies between its
// quotes, escapes and all, and whether it is UTF-8: no byte outside it, and
// every escaped surrogate half ("\ud800") paired, high then low.
func (s *scanner) str() ([]byte, bool) {
	s.i++ // the opening quote
	start := s.i
	text := true
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			raw := s.b[start:s.i]
			s.i++
			return raw, text
		case c == '\\' && s.i+1 < len(s.b) && s.b[s.i+1] == 'u':
			r := s.hex(s.i + 2)
			s.i += 6
			switch {
			case r >= 0xd800 && r < 0xdc00: // high: a low half must follow
				if s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
					if lo := s.hex(s.i + 2); lo >= 0xdc00 && lo < 0xe000 {
						s.i += 6
						continue
					}
				}
				text = false
			case r >= 0xdc00 && r < 0xe000: // low, with no high before it
				text = false
			case r == 0xfffd && s.marshaled:
				text = false
			}
		case c == '\\':
			s.i += 2
		case c < utf8.RuneSelf:
			s.i++
		default:
			r, n := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && n == 1 {
				text = false
			}
			s.i += n
		}
	}
	return s.b[start:], text
}

// hex reads the four hex digits of a \u escape at i; -1 if they are not.
func (s *scanner) hex(i int) rune {
	if i+4 > len(s.b) {
		return -1
	}
	var r rune
	for _, c := range s.b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return -1
		}
	}
	return r
}

// value steps over one value, held to type t (nil: any).
func (s *scanner) value(t reflect.Type) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && (t.Kind() == reflect.Interface || t.Implements(unmarshaler) || reflect.PointerTo(t).Implements(unmarshaler)) {
		t = nil // it reads itself, or takes anything
	}
	s.space()
	if s.i >= len(s.b) {
		return nil
	}
	switch s.b[s.i] {
	case '{':
		return s.object(t)
	case '[':
		return s.array(t)
	case '"':
		if _, text := s.str(); !text {
			return &pathError{what: "not UTF-8"}
		}
	default: // a number, true, false or null
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', ']', '}', ' ', '\t', '\n', '\r':
				return nil
			}
			s.i++
		}
	}
	return nil
}

// seenMost is how many names an object's check compares one by one before
// it keeps them in a map.
const seenMost = 16

func (s *scanner) object(t reflect.Type) error {
	var fields map[string]field
	var elem reflect.Type
	if t != nil {
		switch t.Kind() {
		case reflect.Struct:
			fields = structFields(t)
		case reflect.Map:
			elem = t.Elem()
		}
	}
	var few [seenMost][]byte
	seen, many := few[:0], map[string]struct{}(nil)
	s.i++ // '{'
	for {
		s.space()
		if s.i >= len(s.b) || s.b[s.i] == '}' {
			s.i++
			return nil
		}
		if s.b[s.i] == ',' {
			s.i++
			continue
		}
		name, text := s.str()
		if !text {
			return &pathError{path: []string{string(name)}, what: "name not UTF-8"}
		}
		if bytes.IndexByte(name, '\\') >= 0 {
			var plain string
			if json.Unmarshal(append(append([]byte{'"'}, name...), '"'), &plain) == nil {
				name = []byte(plain)
			}
		}
		var again bool
		if !s.marshaled {
			again, seen, many = twice(name, seen, many)
		}
		if again {
			return &pathError{path: []string{string(name)}, what: "given twice"}
		}
		next := elem
		notNull := false
		if fields != nil {
			f, ok := fields[string(name)]
			if !ok {
				return &pathError{path: []string{string(name)}, what: "unknown field"}
			}
			next, notNull = f.t, f.notNull
		}
		s.space()
		s.i++ // ':'
		s.space()
		if notNull && bytes.HasPrefix(s.b[s.i:], []byte("null")) {
			return &pathError{path: []string{string(name)}, what: "null"}
		}
		if err := s.value(next); err != nil {
			if p, ok := err.(*pathError); ok {
				p.path = append(p.path, string(name))
			}
			return err
		}
	}
}

// twice reports whether name was seen in this object, and notes it in
// seen, or past seenMost names in many, which it returns. They are passed
// and returned by value, not by pointer, so that the array behind seen
// stays on its caller's stack: by pointer it went to the heap, for every
// object of every body.
func twice(name []byte, seen [][]byte, many map[string]struct{}) (bool, [][]byte, map[string]struct{}) {
	if many != nil {
		if _, ok := many[string(name)]; ok {
			return true, seen, many
		}
		many[string(name)] = struct{}{}
		return false, seen, many
	}
	for _, n := range seen {
		if bytes.Equal(n, name) {
			return true, seen, many
		}
	}
	if len(seen) < seenMost {
		return false, append(seen, name), many
	}
	many = make(map[string]struct{}, 2*seenMost)
	for _, n := range seen {
		many[string(n)] = struct{}{}
	}
	many[string(name)] = struct{}{}
	return false, seen, many
}

func (s *scanner) array(t reflect.Type) error {
	var elem reflect.Type
	if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
		elem = t.Elem()
	}
	s.i++ // '['
	for n := 0; ; {
		s.space()
		if s.i >= len(s.b) || s.b[s.i] == ']' {
			s.i++
			return nil
		}
		if s.b[s.i] == ',' {
			s.i++
			n++
			continue
		}
		if err := s.value(elem); err != nil {
			if p, ok := err.(*pathError); ok {
				p.path = append(p.path, fmt.Sprintf("[%d]", n))
			}
			return err
		}
	}
}

var fieldCache sync.Map // reflect.Type -> map[string]field

// field is a name a struct takes in JSON: the type of its value, and
// whether the value may not be null (the tag strictjson:"notnull").
// encoding/json reads null as the field left out, so a field where leaving
// it out means something (a write's condition) refuses null rather than
// take it for that.
type field struct {
	t       reflect.Type
	notNull bool
}

// structFields are the names t takes in JSON, exactly as spelt, with the
// type of each, the fields of embedded structs included; of two fields of
// one name, the shallower, as encoding/json takes it.
func structFields(t reflect.Type) map[string]field {
	if f, ok := fieldCache.Load(t); ok {
		return f.(map[string]field)
	}
	out := map[string]field{}
	depth := map[string]int{}
	for _, f := range reflect.VisibleFields(t) {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				continue // its fields are visible on their own
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if d, taken := depth[name]; !taken || len(f.Index) < d {
			out[name], depth[name] = field{t: f.Type, notNull: f.Tag.Get("strictjson") == "notnull"}, len(f.Index)
		}
	}
	fieldCache.Store(t, out)
	return out
}

// Object checks that data, once past JSON white space, starts an object.
// encoding/json reads null into a struct or map as if it were {}, and the
// protocol's bodies are objects: a body of null is no call's arguments.
func Object(data []byte) error {
	data = bytes.TrimLeft(data, " \t\r\n")
	if len(data) > 0 && data[0] == '{' {
		return nil
	}
	if len(data) > 16 {
		data = data[:16]
	}
	return fmt.Errorf("want a JSON object, not %q", data)
}

// Unmarshal is json.Unmarshal, which reads data in place, where a
// json.Decoder first copies it into a buffer of its own that doubles as it
// fills: a body of one large string cost five times its size to decode,
// and two times without the copy. What follows the value, which
// json.Unmarshal refuses as a syntax error, is named as Rest names it.
func Unmarshal(data []byte, v any) error {
	err := json.Unmarshal(data, v)
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) && strings.HasSuffix(syntax.Error(), "after top-level value") && syntax.Offset > 0 && syntax.Offset <= int64(len(data)) {
		return trailing(data[syntax.Offset-1:])
	}
	return err
}

// trailing names what follows a JSON value, rest, which is not only white
// space.
func trailing(rest []byte) error {
	rest = bytes.TrimLeft(rest, " \t\r\n")
	if len(rest) > 0 && rest[0] != ']' && rest[0] != '}' {
		return errors.New("more than one JSON value")
	}
	return fmt.Errorf("%q after the JSON value", rest[:min(len(rest), 16)])
}

// Rest checks that nothing but white space follows the value dec has just
// decoded from data. dec.More, the usual check, looks only for the start
// of another value: it reports nothing more before a stray ']' or '}', so
// a body such as {"key":"k"}] would pass for its first object.
func Rest(dec *json.Decoder, data []byte) error {
	if dec.More() {
		return errors.New("more than one JSON value")
	}
	rest := data[min(max(dec.InputOffset(), 0), int64(len(data))):]
	if len(bytes.TrimLeft(rest, " \t\r\n")) > 0 {
		return trailing(rest)
	}
	return nil
}
