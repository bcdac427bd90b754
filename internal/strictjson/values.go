package strictjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
)

// Values checks, before data is decoded into v's type, that it holds at
// most most JSON values: every object, array, string, number, true, false
// and null counts, the body itself included, but the numbers of an array
// read into a Go slice or array of numbers, which decode into a few bytes
// each, about what their text takes, count one for every eight. A value read into any costs far
// more than its text (an empty object, two bytes, is a map of a hundred
// and more; a number is boxed, and its slot in the array grows twice as
// large as it fills), so a body's bytes alone bound neither the memory its
// decoding takes nor the garbage it leaves; its count of values does.
//
// It reads data as it comes, in one pass that allocates nothing, and stops
// at the value past most, so a body of millions of values costs that pass
// over the first most of them. data need not be JSON: whatever is not is
// stepped over, and left to the decoder to refuse.
func Values(data []byte, v any, most int) error {
	// Every value but the first takes two bytes at the least: a digit or
	// a bracket and a comma, or an empty array's two. A body of no more
	// than twice most bytes holds most values at the most, and is not
	// counted; what in it is not JSON the decoder refuses before it
	// builds anything.
	if len(data) <= 2*most {
		return nil
	}
	if _, ok := Count(data, v, most); !ok {
		return fmt.Errorf("more than %d JSON values, the most one body holds (every object, array, string, number, true, false and null counts, and every eighth number of a vector): send fewer in one call", most)
	}
	return nil
}

// Count is how many values Values finds in data, up to most; within is
// false when there are more.
func Count(data []byte, v any, most int) (n int, within bool) {
	c := counter{b: data, left: most}
	within = c.value(reflect.TypeOf(v), 0)
	return most - max(c.left, 0), within
}

// deepest is where Values stops looking into a body: past encoding/json's
// own limit, 10,000 levels, which refuses such a body anyway.
const deepest = 10001

// counter walks a body, counting down the values it may still hold.
type counter struct {
	b       []byte
	i       int
	left    int
	numbers int // read into Go numbers, of which every eighth counts
}

func (c *counter) space() { c.i = space(c.b, c.i) }

// value counts the value at c.i and what it holds, read as type t (nil:
// any); false once more values than allowed are found. Every call steps
// over at least one byte, so a body that is not JSON is walked to its end.
func (c *counter) value(t reflect.Type, depth int) bool {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	c.space()
	if c.i >= len(c.b) {
		return true
	}
	if c.left--; c.left < 0 {
		return false
	}
	switch c.b[c.i] {
	case '{':
		if depth >= deepest {
			c.i = len(c.b)
			return true
		}
		return c.object(t, depth+1)
	case '[':
		if depth >= deepest {
			c.i = len(c.b)
			return true
		}
		return c.array(t, depth+1)
	case '"':
		c.str()
	default:
		c.scalar()
	}
	return true
}

// str steps over a string and returns what lies between its quotes.
func (c *counter) str() []byte {
	c.i++ // the opening quote
	start := c.i
	for c.i < len(c.b) {
		switch c.b[c.i] {
		case '"':
			c.i++
			return c.b[start : c.i-1]
		case '\\':
			c.i++
		}
		c.i++
	}
	return c.b[start:min(c.i, len(c.b))]
}

// scalar steps over a number, true, false or null, or, where there is
// none, over one byte that is not JSON.
func (c *counter) scalar() {
	start := c.i
	for c.i < len(c.b) {
		switch c.b[c.i] {
		case ',', ':', ']', '}', '[', '{', '"', ' ', '\t', '\n', '\r':
			if c.i == start {
				c.i++
			}
			return
		}
		c.i++
	}
}

func (c *counter) object(t reflect.Type, depth int) bool {
	var fields map[string]field
	var elem reflect.Type
	if t != nil && !readsItself(t) {
		switch t.Kind() {
		case reflect.Struct:
			fields = structFields(t)
		case reflect.Map:
			elem = t.Elem()
		}
	}
	c.i++ // '{'
	for {
		c.space()
		if c.i >= len(c.b) {
			return true
		}
		switch c.b[c.i] {
		case '}':
			c.i++
			return true
		case ',':
			c.i++
			continue
		case '"':
		default:
			if !c.value(nil, depth) {
				return false
			}
			continue
		}
		name := c.str()
		next := elem
		if fields != nil {
			if bytes.IndexByte(name, '\\') >= 0 {
				var plain string
				if json.Unmarshal(append(append([]byte{'"'}, name...), '"'), &plain) == nil {
					name = []byte(plain)
				}
			}
			next = fields[string(name)].t // nil for a name it does not take: any
		}
		c.space()
		if c.i < len(c.b) && c.b[c.i] == ':' {
			c.i++
		}
		if !c.value(next, depth) {
			return false
		}
	}
}

func (c *counter) array(t reflect.Type, depth int) bool {
	var elem reflect.Type
	if t != nil && !readsItself(t) && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
		elem = t.Elem()
	}
	numbers := elem != nil && isNumber(elem)
	c.i++ // '['
	for {
		c.space()
		if c.i >= len(c.b) {
			return true
		}
		switch b := c.b[c.i]; {
		case b == ']':
			c.i++
			return true
		case b == ',':
			c.i++
		case numbers && (b == '-' || b >= '0' && b <= '9'):
			c.scalar()
			if c.numbers++; c.numbers%8 == 0 {
				if c.left--; c.left < 0 {
					return false
				}
			}
		default:
			if !c.value(elem, depth) {
				return false
			}
		}
	}
}

// readsItself reports whether t decodes itself (json.Unmarshaler), so
// that its fields say nothing of what it takes.
func readsItself(t reflect.Type) bool {
	return t.Kind() == reflect.Interface || t.Implements(unmarshaler) || reflect.PointerTo(t).Implements(unmarshaler)
}

// isNumber reports whether t is a Go number, which a JSON number decodes
// into without boxing.
func isNumber(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return true
	}
	return false
}
