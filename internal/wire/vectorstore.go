package wire

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/abi-engine/engine/ports"
)

// Operations of the vector_store service. Values are JSON numbers read as
// float32; a payload is any JSON object, its numbers read back as float64.
const (
	VecCreateCollection = "create_collection"
	VecDeleteCollection = "delete_collection"
	VecCollections      = "collections"
	VecUpsert           = "upsert"
	VecSearch           = "search"
	VecGet              = "get"
	VecDelete           = "delete"
	VecCount            = "count"
)

// VecCollection describes a collection: create_collection, and each
// element of collections' answer. Metric is cosine, dot or euclid.
type VecCollection struct {
	Name      string `json:"name"`
	Dimension int    `json:"dimension"`
	Metric    string `json:"metric"`
}

// VecName names a collection: delete_collection.
type VecName struct {
	Name string `json:"name"`
}

// VecIn names the collection an operation looks in: count.
type VecIn struct {
	Collection string `json:"collection"`
}

// VecCollectionInfo is one element of collections' answer: Indexed is how
// many vectors an approximate index holds now, left out while the
// collection is searched exactly.
type VecCollectionInfo struct {
	VecCollection
	Indexed int `json:"indexed,omitempty"`
}

// VecCollectionList answers collections, sorted by name.
type VecCollectionList struct {
	Collections []VecCollectionInfo `json:"collections"`
}

// Vector is a point and its payload, as answers give it.
type Vector struct {
	ID      string         `json:"id"`
	Values  []float32      `json:"values"`
	Payload map[string]any `json:"payload,omitempty"`
}

// UpsertVector is a vector as an upsert writes it. Its values come in one
// of two forms: values, JSON numbers, or values_f32, the same float32s
// packed (PackFloats): four bytes each, little-endian IEEE 754, in base64.
// A batch of 200 vectors of dimension 384 is 77,000 numbers, and
// formatting and reading them as text costs most of an upsert's time;
// packed, they cost next to nothing and take half the bytes. The facade
// sends the packed form. Neither may be null: null is neither numbers nor
// bytes, and read as the field left out, a vector giving both forms, one
// of them null, would pass for one that gives only the other.
type UpsertVector struct {
	ID      string         `json:"id"`
	Values  []float32      `json:"values,omitempty" strictjson:"notnull"`
	Packed  Bytes          `json:"values_f32,omitempty" strictjson:"notnull"`
	Payload map[string]any `json:"payload,omitempty"`
}

// PackFloats returns values in the packed form of values_f32.
func PackFloats(values []float32) Bytes {
	out := make([]byte, 4*len(values))
	for i, x := range values {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
	}
	return out
}

// Floats returns the vector's values, from whichever form it came in; a
// vector that carries both, or packed bytes that are not whole float32s,
// is invalid.
func (v UpsertVector) Floats() ([]float32, error) {
	if v.Packed == nil {
		return v.Values, nil
	}
	if v.Values != nil {
		return nil, fmt.Errorf("vector %q has both values and values_f32: %w", v.ID, ports.ErrInvalidArgument)
	}
	if len(v.Packed)%4 != 0 {
		return nil, fmt.Errorf("vector %q: values_f32 is %d bytes, not a whole number of 4-byte floats: %w",
			v.ID, len(v.Packed), ports.ErrInvalidArgument)
	}
	out := make([]float32, len(v.Packed)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(v.Packed[4*i:]))
	}
	return out, nil
}

// VecWrite writes vectors, replacing those with the same ids: upsert.
type VecWrite struct {
	Collection string         `json:"collection"`
	Vectors    []UpsertVector `json:"vectors"`
}

// VecQuery asks for the k closest vectors whose payload has every field of
// filter equal to the given JSON value: search.
type VecQuery struct {
	Collection string         `json:"collection"`
	Vector     []float32      `json:"vector"`
	K          int            `json:"k"`
	Filter     map[string]any `json:"filter,omitempty"`
}

// ScoredVector is one search result. For cosine and dot a higher score is
// closer; for euclid the score is the distance.
type ScoredVector struct {
	Vector
	Score float64 `json:"score"`
}

// VecResults answers search, closest first.
type VecResults struct {
	Results []ScoredVector `json:"results"`
}

// VecRef names a vector: get.
type VecRef struct {
	Collection string `json:"collection"`
	ID         string `json:"id"`
}

// VecIDs names vectors: delete, where missing ids are ignored.
type VecIDs struct {
	Collection string   `json:"collection"`
	IDs        []string `json:"ids"`
}
