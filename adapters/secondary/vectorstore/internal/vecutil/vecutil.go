// Package vecutil holds what the vector store adapters share: input checks
// that produce the port's errors, the exact scores and payload filters.
package vecutil

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"regexp"

	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

var namePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// CheckName accepts a collection name of 1 to 64 characters of [A-Za-z0-9_-].
func CheckName(name string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("collection name %q: want 1 to 64 of A-Z a-z 0-9 _ -: %w", name, ports.ErrInvalidArgument)
	}
	return nil
}

// CheckCollection checks the settings of a new collection.
func CheckCollection(name string, dimension int, metric ports.Metric) error {
	if err := CheckName(name); err != nil {
		return err
	}
	if dimension < 1 || dimension > ports.MaxDimension {
		return fmt.Errorf("collection %q: dimension %d: want 1 to %d: %w", name, dimension, ports.MaxDimension, ports.ErrInvalidArgument)
	}
	switch metric {
	case ports.MetricCosine, ports.MetricDot, ports.MetricEuclid:
		return nil
	}
	return fmt.Errorf("collection %q: metric %q: want cosine, dot or euclid: %w", name, metric, ports.ErrInvalidArgument)
}

// CheckValues checks one vector's dimension and that every value is finite.
func CheckValues(collection, what string, dimension int, values []float32) error {
	if len(values) != dimension {
		return fmt.Errorf("%s has dimension %d, collection %q has dimension %d: %w",
			what, len(values), collection, dimension, ports.ErrInvalidArgument)
	}
	for i, x := range values {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return fmt.Errorf("%s: value %d is %v: %w", what, i, x, ports.ErrInvalidArgument)
		}
	}
	return nil
}

// CheckID holds a vector id to the bound of keys and document ids, 1 to
// storecheck.MaxKey bytes of UTF-8 without NUL, so that no adapter keeps
// an id another would refuse.
func CheckID(collection, id string) error {
	if err := storecheck.Key("vector id", id); err != nil {
		return fmt.Errorf("collection %q: %w", collection, err)
	}
	return nil
}

// CheckIDs checks every id of a delete.
func CheckIDs(collection string, ids []string) error {
	for _, id := range ids {
		if err := CheckID(collection, id); err != nil {
			return err
		}
	}
	return nil
}

// CheckVectors checks a whole batch before anything is written, so a bad
// vector loses nothing.
func CheckVectors(collection string, dimension int, vs []ports.Vector) error {
	for _, v := range vs {
		if err := storecheck.Key("vector id", v.ID); err != nil {
			return fmt.Errorf("upsert into %q: %w", collection, err)
		}
		if err := CheckValues(collection, fmt.Sprintf("vector %q", v.ID), dimension, v.Values); err != nil {
			return err
		}
	}
	return nil
}

// CheckSearch checks a query and k.
func CheckSearch(collection string, dimension int, query []float32, k int) error {
	if k < 1 || k > ports.MaxK {
		return fmt.Errorf("search %q: k is %d, want 1 to %d: %w", collection, k, ports.MaxK, ports.ErrInvalidArgument)
	}
	return CheckValues(collection, "query", dimension, query)
}

// NormalizePayload gives a payload the shape of a JSON round trip, so every
// adapter hands back float64 numbers and plain maps and slices; an empty
// payload is nil. Text that is not UTF-8 is refused: the round trip would
// turn it into U+FFFD.
func NormalizePayload(p map[string]any) (map[string]any, error) {
	if len(p) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("payload is not JSON: %v: %w", err, ports.ErrInvalidArgument)
	}
	if err := storecheck.Marshaled("payload", b); err != nil {
		return nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("payload is not JSON: %v: %w", err, ports.ErrInvalidArgument)
	}
	if err := storecheck.JSON("payload", out); err != nil {
		return nil, err
	}
	return out, nil
}

// Filter is a normalised equality filter on top-level payload fields.
type Filter map[string]any

// NewFilter normalises the filter's values as payloads are.
func NewFilter(f map[string]any) (Filter, error) {
	n, err := NormalizePayload(f)
	if err != nil {
		return nil, fmt.Errorf("filter: %w", err)
	}
	return Filter(n), nil
}

// Match reports whether every field of the filter is present in the
// normalised payload with an equal value.
func (f Filter) Match(payload map[string]any) bool {
	for k, want := range f {
		got, ok := payload[k]
		if !ok || !reflect.DeepEqual(got, want) {
			return false
		}
	}
	return true
}

// Score is the exact score of a against b in float64: cosine similarity and
// dot product are higher when closer, euclidean distance lower.
func Score(m ports.Metric, a, b []float32) float64 {
	var dot, na, nb, dist float64
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		switch m {
		case ports.MetricEuclid:
			dist += (x - y) * (x - y)
		default:
			dot += x * y
			na += x * x
			nb += y * y
		}
	}
	switch m {
	case ports.MetricCosine:
		if na == 0 || nb == 0 {
			return 0
		}
		return dot / math.Sqrt(na*nb)
	case ports.MetricDot:
		return dot
	}
	return math.Sqrt(dist)
}
