// Package strictjson holds a JSON body to the letter of a protocol where
// encoding/json is lenient.
package strictjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
)

// ExactFields checks what encoding/json lets through on the way into v's
// type: a field name that matches one of the type's only when case is
// ignored ("KEY" for "key"), and a name given twice in one object, of which
// encoding/json keeps the last. The protocol takes neither. data must be
// JSON that decoded into v without error. Values of a type that reads
// itself (json.Unmarshaler) and of interface type are not looked into,
// except that their objects may not repeat a name either.
func ExactFields(data []byte, v any) error {
	t := reflect.TypeOf(v)
	if t == nil {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return exact(dec, t, "")
}

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

// exact reads one value from dec, held to type t (nil: any), at path.
func exact(dec *json.Decoder, t reflect.Type, path string) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && (t.Implements(unmarshaler) || reflect.PointerTo(t).Implements(unmarshaler)) {
		t = nil // it reads itself
	}
	if t != nil && t.Kind() == reflect.Interface {
		t = nil
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		var fields map[string]reflect.Type
		if t != nil && t.Kind() == reflect.Struct {
			fields = structFields(t)
		}
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return err
			}
			name := tok.(string)
			at := path + "." + name
			if seen[name] {
				return fmt.Errorf("field %q given twice", strings.TrimPrefix(at, "."))
			}
			seen[name] = true
			var next reflect.Type
			switch {
			case fields != nil:
				ft, ok := fields[name]
				if !ok {
					return fmt.Errorf("unknown field %q", strings.TrimPrefix(at, "."))
				}
				next = ft
			case t != nil && t.Kind() == reflect.Map:
				next = t.Elem()
			}
			if err := exact(dec, next, at); err != nil {
				return err
			}
		}
		_, err = dec.Token() // '}'
		return err
	case json.Delim('['):
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if err := exact(dec, elem, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		_, err = dec.Token() // ']'
		return err
	}
	return nil
}

var fieldCache sync.Map // reflect.Type -> map[string]reflect.Type

// structFields are the names t takes in JSON, exactly as spelt, with the
// type of each, the fields of embedded structs included.
func structFields(t reflect.Type) map[string]reflect.Type {
	if f, ok := fieldCache.Load(t); ok {
		return f.(map[string]reflect.Type)
	}
	out := map[string]reflect.Type{}
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() && !f.Anonymous {
			continue
		}
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
		if _, taken := out[name]; !taken || len(f.Index) == 1 {
			out[name] = f.Type
		}
	}
	fieldCache.Store(t, out)
	return out
}
