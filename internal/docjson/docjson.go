// Package docjson holds what the document adapters must agree on: the
// canonical JSON form of documents and query values, the order of JSON
// values in Find, and the page cursor.
package docjson

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

// Data returns the canonical JSON of a document's data and the data as a
// reader of that JSON sees it (numbers as float64), so every adapter hands
// back the same values. nil data is an empty object. The data returned is
// a copy: the caller's is neither kept nor changed.
func Data(id string, data map[string]any) ([]byte, map[string]any, error) {
	if data == nil {
		data = map[string]any{}
	}
	// Data as a decoder of JSON yields it, as every call from the wire
	// brings it, is copied in one walk and written once; anything else,
	// and anything to refuse, takes the long way, which names the fault.
	if m, ok := plainObject(data, 1); ok {
		if raw, err := json.Marshal(m); err == nil {
			return raw, m, nil
		}
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return nil, nil, fmt.Errorf("document %q is not JSON: %w: %w", id, ports.ErrInvalidArgument, err)
	}
	if err := storecheck.Marshaled(fmt.Sprintf("document %q data", id), raw); err != nil {
		return nil, nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, nil, fmt.Errorf("document %q is not JSON: %w: %w", id, ports.ErrInvalidArgument, err)
	}
	if err := storecheck.JSON(fmt.Sprintf("document %q data", id), m); err != nil {
		return nil, nil, err
	}
	zeroIn(m)
	raw, err = json.Marshal(m)
	if err != nil {
		return nil, nil, fmt.Errorf("document %q is not JSON: %w: %w", id, ports.ErrInvalidArgument, err)
	}
	return raw, m, nil
}

// plainObject copies m as reading its JSON back would yield it, with every
// -0 made 0, as zeroIn does, when m holds only what such a reading holds
// and nothing Data refuses: maps of string keys, slices of any, strings,
// finite float64s, bools and nil, no string or key outside UTF-8 or with
// NUL, no map or slice nested deeper than ports.MaxDepth (depth is m's
// level, 1 at the top, as storecheck.JSON counts). A nil map or slice
// within is null, as json.Marshal writes it. ok is false for anything
// else, which Data's long way then marshals, reads back and checks.
func plainObject(m map[string]any, depth int) (map[string]any, bool) {
	if depth > ports.MaxDepth {
		return nil, false
	}
	out := make(map[string]any, len(m))
	for k, e := range m {
		if !plainText(k) {
			return nil, false
		}
		c, ok := plainValue(e, depth+1)
		if !ok {
			return nil, false
		}
		out[k] = c
	}
	return out, true
}

func plainValue(v any, depth int) (any, bool) {
	switch v := v.(type) {
	case nil, bool:
		return v, true
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, false
		}
		if v == 0 {
			return 0.0, true
		}
		return v, true
	case string:
		return v, plainText(v)
	case map[string]any:
		if v == nil {
			return nil, true
		}
		return plainObject(v, depth)
	case []any:
		if v == nil {
			return nil, true
		}
		if depth > ports.MaxDepth {
			return nil, false
		}
		out := make([]any, len(v))
		for i, e := range v {
			c, ok := plainValue(e, depth+1)
			if !ok {
				return nil, false
			}
			out[i] = c
		}
		return out, true
	}
	return nil, false
}

// plainText reports whether s is UTF-8 without NUL, text that json.Marshal
// writes and json.Unmarshal reads back as it is, and storecheck takes.
func plainText(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// zeroIn turns every -0 inside an array or object into 0, a document's
// own fields included: equal composites then have one text (SQLite
// compares them as text, and -0 and 0 are equal numbers), and every
// adapter gives back what PostgreSQL does, whose jsonb has no -0.
func zeroIn(v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if f, ok := e.(float64); ok && f == 0 {
				v[k] = 0.0
			}
			zeroIn(e)
		}
	case []any:
		for i, e := range v {
			if f, ok := e.(float64); ok && f == 0 {
				v[i] = 0.0
			}
			zeroIn(e)
		}
	}
}

// Decode reads stored JSON back into a document's data.
func Decode(raw []byte) (map[string]any, error) {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// Where is one equality condition of a query, in canonical form.
type Where struct {
	Field string
	Value any    // nil, bool, float64, string, []any or map[string]any
	JSON  string // the value's canonical JSON
}

// Check validates a query and returns its conditions, in field order so
// that SQL built from them is stable, and its page size.
func Check(q ports.Query) ([]Where, int, error) {
	where, err := Conditions(q.Where)
	if err != nil {
		return nil, 0, err
	}
	if q.OrderBy != "" {
		if err := storecheck.Field(q.OrderBy); err != nil {
			return nil, 0, fmt.Errorf("order by: %w", err)
		}
	}
	limit, err := storecheck.Limit("limit", q.Limit)
	if err != nil {
		return nil, 0, err
	}
	return where, limit, nil
}

// Conditions validates where and returns it in canonical form, by field.
// It names at most ports.MaxWhere fields.
func Conditions(where map[string]any) ([]Where, error) {
	if len(where) > ports.MaxWhere {
		return nil, fmt.Errorf("where names %d fields, more than the most, %d: %w", len(where), ports.MaxWhere, ports.ErrInvalidArgument)
	}
	out := make([]Where, 0, len(where))
	for field, v := range where {
		if err := storecheck.Field(field); err != nil {
			return nil, fmt.Errorf("where: %w", err)
		}
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("where %q: value is not JSON: %w: %w", field, ports.ErrInvalidArgument, err)
		}
		if err := storecheck.Marshaled(fmt.Sprintf("where %q", field), raw); err != nil {
			return nil, err
		}
		var c any
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("where %q: value is not JSON: %w: %w", field, ports.ErrInvalidArgument, err)
		}
		if err := storecheck.JSON(fmt.Sprintf("where %q", field), c); err != nil {
			return nil, err
		}
		zeroIn(c)
		if raw, err = json.Marshal(c); err != nil {
			return nil, fmt.Errorf("where %q: value is not JSON: %w: %w", field, ports.ErrInvalidArgument, err)
		}
		out = append(out, Where{Field: field, Value: c, JSON: string(raw)})
	}
	slices.SortFunc(out, func(a, b Where) int { return strings.Compare(a.Field, b.Field) })
	return out, nil
}

// Ranks of JSON values in Find's order: a missing field or null first, then
// booleans (false before true), numbers, strings by bytes, and last arrays
// before objects. Composites are not compared by what they hold: no two
// backends render one as the same text (key order, blanks, escapes, number
// forms), so arrays tie with arrays and objects with objects, and the id
// breaks the tie, as for every other rank.
const (
	RankNull = iota
	RankBool
	RankNumber
	RankString
	RankComposite
)

// Key is a document's position in Find's order: (Rank, Num, Str, ID). Num
// is a number's value, 1 for true and 1 for an object (0 for false and an
// array); Str is a string's value, and "" for every other rank.
type Key struct {
	Rank int     `json:"r"`
	Num  float64 `json:"n"`
	Str  string  `json:"s"`
	ID   string  `json:"id"`
}

// KeyOf computes the key of a canonical value; field present or not.
func KeyOf(id string, v any, present bool) Key {
	k := Key{ID: id}
	if !present {
		return k
	}
	switch v := v.(type) {
	case bool:
		k.Rank = RankBool
		if v {
			k.Num = 1
		}
	case float64:
		k.Rank, k.Num = RankNumber, v
	case string:
		k.Rank, k.Str = RankString, v
	case []any:
		k.Rank = RankComposite
	case map[string]any:
		k.Rank, k.Num = RankComposite, 1
	}
	return k
}

// Compare orders keys ascending.
func Compare(a, b Key) int {
	switch {
	case a.Rank != b.Rank:
		return a.Rank - b.Rank
	case a.Num < b.Num:
		return -1
	case a.Num > b.Num:
		return 1
	case a.Str < b.Str:
		return -1
	case a.Str > b.Str:
		return 1
	case a.ID < b.ID:
		return -1
	case a.ID > b.ID:
		return 1
	}
	return 0
}

// cursor is a page's last key with the query it belongs to, so a cursor
// used with another order is refused rather than skipping documents.
type cursor struct {
	OrderBy string `json:"o"`
	Desc    bool   `json:"d"`
	Key
}

// EncodeCursor makes the cursor that continues q after k.
func EncodeCursor(q ports.Query, k Key) string {
	raw, _ := json.Marshal(cursor{OrderBy: q.OrderBy, Desc: q.Desc, Key: k}) // plain fields always marshal
	return base64.RawURLEncoding.EncodeToString(raw)
}

// DecodeCursor reads q.Cursor; ok is false when q has none. A cursor no
// key could have made (a rank out of range, a NUL in the string, the text
// of an array or object, as releases that ordered composites by their text
// made) is refused here, before a backend meets a value it cannot hold or
// a page skips the composites a cursor of another order passed over.
func DecodeCursor(q ports.Query) (k Key, ok bool, err error) {
	if q.Cursor == "" {
		return Key{}, false, nil
	}
	bad := fmt.Errorf("cursor %q is not one of this query's: %w", q.Cursor, ports.ErrInvalidArgument)
	raw, err := base64.RawURLEncoding.DecodeString(q.Cursor)
	if err != nil {
		return Key{}, false, bad
	}
	var c cursor
	if err := json.Unmarshal(raw, &c); err != nil || c.OrderBy != q.OrderBy || c.Desc != q.Desc ||
		math.IsNaN(c.Num) || storecheck.Key("id", c.ID) != nil ||
		c.Rank < RankNull || c.Rank > RankComposite || strings.IndexByte(c.Str, 0) >= 0 ||
		c.Rank == RankComposite && c.Str != "" {
		return Key{}, false, bad
	}
	return c.Key, true, nil
}
