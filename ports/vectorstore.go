package ports

import "context"

// Metric is how a vector collection measures similarity.
type Metric string

const (
	MetricCosine Metric = "cosine"
	MetricDot    Metric = "dot"
	MetricEuclid Metric = "euclid"
)

// Vector is a point with a JSON payload.
type Vector struct {
	ID      string
	Values  []float32
	Payload map[string]any
}

// ScoredVector is a search result. For cosine and dot a higher score is
// closer; for euclid the score is the distance and a lower one is closer.
type ScoredVector struct {
	Vector
	Score float64
}

// VectorCollection describes a collection.
type VectorCollection struct {
	Name      string
	Dimension int
	Metric    Metric
	// Indexed is how many of its vectors an approximate index holds now,
	// for a store that builds one in the background; 0 while the
	// collection is searched exactly or the store does not tell.
	Indexed int
}

// VectorStore keeps vectors in named collections (names as for documents).
// A vector of the wrong dimension is ErrInvalidArgument naming both
// dimensions; a missing collection is ErrNotFound.
type VectorStore interface {
	// CreateCollection makes a collection; an existing one with other
	// settings is ErrConflict, with the same settings it is no error. The
	// dimension is 1 to MaxDimension.
	CreateCollection(ctx context.Context, name string, dimension int, metric Metric) error
	DeleteCollection(ctx context.Context, name string) error
	Collections(ctx context.Context) ([]VectorCollection, error)
	// Upsert writes the vectors, replacing those with the same ids.
	Upsert(ctx context.Context, collection string, vectors []Vector) error
	// Search returns the k closest vectors whose payload has every field of
	// filter equal to the given JSON value, closest first; k is 1 to MaxK.
	// Each carries its values (on a cosine collection, perhaps normalised)
	// and its payload, as Get would return them.
	Search(ctx context.Context, collection string, query []float32, k int, filter map[string]any) ([]ScoredVector, error)
	Get(ctx context.Context, collection, id string) (Vector, error)
	// Delete removes the vectors with these ids; missing ids are ignored.
	Delete(ctx context.Context, collection string, ids []string) error
	Count(ctx context.Context, collection string) (int, error)
}
