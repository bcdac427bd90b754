package vecindex

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
)

// terms interns the (field, value) pairs of the payloads, so a filter is
// checked against a slot with a few integer comparisons instead of a walk
// through a decoded payload. A term lives while some slot holds it.
type terms struct {
	ids  map[string]uint32
	refs []int32
	keys []string
	free []uint32
}

func newTerms() *terms { return &terms{ids: map[string]uint32{}} }

// termKey is one field and its value, canonical: JSON with sorted object
// keys, and -0 written as 0 because the filters compare numbers by value.
func termKey(field string, value any) string {
	var b strings.Builder
	b.WriteString(field)
	b.WriteByte(0)
	v, _ := json.Marshal(canonical(value)) // values come from a JSON round trip
	b.Write(v)
	return b.String()
}

func canonical(v any) any {
	switch x := v.(type) {
	case float64:
		if x == 0 {
			return float64(0)
		}
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = canonical(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = canonical(e)
		}
		return out
	}
	return v
}

// termKeys gives the keys of the payload's top-level fields, for add. It
// reads no index state, so a write makes them before it takes the lock.
func termKeys(payload map[string]any) []string {
	if len(payload) == 0 {
		return nil
	}
	out := make([]string, 0, len(payload))
	for field, value := range payload {
		out = append(out, termKey(field, value))
	}
	return out
}

// clone is a copy of t that changes apart from it.
func (t *terms) clone() *terms {
	return &terms{ids: maps.Clone(t.ids), refs: slices.Clone(t.refs), keys: slices.Clone(t.keys), free: slices.Clone(t.free)}
}

// add interns a payload's field keys (termKeys) and returns their terms,
// sorted.
func (t *terms) add(keys []string) []uint32 {
	if len(keys) == 0 {
		return nil
	}
	out := make([]uint32, 0, len(keys))
	for _, key := range keys {
		id, ok := t.ids[key]
		if !ok {
			if n := len(t.free); n > 0 {
				id = t.free[n-1]
				t.free = t.free[:n-1]
				t.keys[id] = key
			} else {
				id = uint32(len(t.refs))
				t.refs = append(t.refs, 0)
				t.keys = append(t.keys, key)
			}
			t.ids[key] = id
		}
		t.refs[id]++
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// drop releases the terms of a payload that is gone.
func (t *terms) drop(ids []uint32) {
	for _, id := range ids {
		if t.refs[id]--; t.refs[id] == 0 {
			delete(t.ids, t.keys[id])
			t.keys[id] = ""
			t.free = append(t.free, id)
		}
	}
}

// lookup gives the terms a filter asks for; ok is false when some field
// and value is in no payload, so nothing matches.
func (t *terms) lookup(filter map[string]any) (ids []uint32, ok bool) {
	for field, value := range filter {
		id, found := t.ids[termKey(field, value)]
		if !found {
			return nil, false
		}
		ids = append(ids, id)
	}
	return ids, true
}

// holds reports whether the sorted terms of a slot include every wanted one.
func holds(have, want []uint32) bool {
	for _, w := range want {
		if _, found := slices.BinarySearch(have, w); !found {
			return false
		}
	}
	return true
}
