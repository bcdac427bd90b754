package wire

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

// Vector is a point and its payload: in upsert, and get's answer.
type Vector struct {
	ID      string         `json:"id"`
	Values  []float32      `json:"values"`
	Payload map[string]any `json:"payload,omitempty"`
}

// VecWrite writes vectors, replacing those with the same ids: upsert.
type VecWrite struct {
	Collection string   `json:"collection"`
	Vectors    []Vector `json:"vectors"`
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
