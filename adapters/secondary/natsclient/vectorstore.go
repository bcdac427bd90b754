package natsclient

import (
	"context"
	"errors"
	"strings"

	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// VectorStore is the vector_store service of the serving engine.
type VectorStore struct{ c *Client }

var _ ports.VectorStore = VectorStore{}

// NewVectorStore calls the vector_store service through c.
func NewVectorStore(c *Client) VectorStore { return VectorStore{c: c} }

func vecSubject(op string) string { return wire.Subject(ports.ServiceVectorStore, op) }

func vectorFrom(v wire.Vector) ports.Vector {
	return ports.Vector{ID: v.ID, Values: v.Values, Payload: v.Payload}
}

// CreateCollection implements ports.VectorStore.
func (s VectorStore) CreateCollection(ctx context.Context, name string, dimension int, metric ports.Metric) error {
	if err := text("collection", name); err != nil {
		return err
	}
	if err := text("metric", string(metric)); err != nil {
		return err
	}
	return s.c.Call(ctx, vecSubject(wire.VecCreateCollection), wire.VecCollection{Name: name, Dimension: dimension, Metric: string(metric)}, nil)
}

// DeleteCollection implements ports.VectorStore.
func (s VectorStore) DeleteCollection(ctx context.Context, name string) error {
	if err := text("collection", name); err != nil {
		return err
	}
	return s.c.Call(ctx, vecSubject(wire.VecDeleteCollection), wire.VecName{Name: name}, nil)
}

// Collections implements ports.VectorStore.
func (s VectorStore) Collections(ctx context.Context) ([]ports.VectorCollection, error) {
	var out wire.VecCollectionList
	if err := s.c.Call(ctx, vecSubject(wire.VecCollections), wire.Empty{}, &out); err != nil {
		return nil, err
	}
	cs := make([]ports.VectorCollection, len(out.Collections))
	for i, c := range out.Collections {
		cs[i] = ports.VectorCollection{Name: c.Name, Dimension: c.Dimension, Metric: ports.Metric(c.Metric), Indexed: c.Indexed}
	}
	return cs, nil
}

// Upsert implements ports.VectorStore.
func (s VectorStore) Upsert(ctx context.Context, collection string, vectors []ports.Vector) error {
	if err := text("collection", collection); err != nil {
		return err
	}
	req := wire.VecWrite{Collection: collection, Vectors: make([]wire.UpsertVector, len(vectors))}
	for i, v := range vectors {
		if err := text("id", v.ID); err != nil {
			return err
		}
		req.Vectors[i] = wire.UpsertVector{ID: v.ID, Packed: wire.PackFloats(v.Values), Payload: v.Payload}
	}
	var out wire.Empty
	err := callEncoded(ctx, s.c, vecSubject(wire.VecUpsert), req, &out)
	if !olderEngineRefusedPacked(err) {
		return err
	}
	// An engine from before values_f32 answered; it reads numbers only.
	for i, v := range vectors {
		req.Vectors[i] = wire.UpsertVector{ID: v.ID, Values: v.Values, Payload: v.Payload}
	}
	return callEncoded(ctx, s.c, vecSubject(wire.VecUpsert), req, &out)
}

// olderEngineRefusedPacked reports whether err is an engine's refusal of
// the field values_f32 as unknown: an engine older than it, met while a
// deploy replaces engines and callers in any order. Such an engine names
// the field alone (`unknown field "values_f32"`); one that decodes a body
// in place names its path (`unknown field "vectors[0].values_f32"`).
func olderEngineRefusedPacked(err error) bool {
	if !errors.Is(err, ports.ErrInvalidArgument) {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, `unknown field "values_f32"`) ||
		strings.Contains(msg, `unknown field "vectors[`) && strings.Contains(msg, `].values_f32"`)
}

// Search implements ports.VectorStore.
func (s VectorStore) Search(ctx context.Context, collection string, query []float32, k int, filter map[string]any) ([]ports.ScoredVector, error) {
	if err := text("collection", collection); err != nil {
		return nil, err
	}
	var out wire.VecResults
	err := callEncoded(ctx, s.c, vecSubject(wire.VecSearch), wire.VecQuery{Collection: collection, Vector: query, K: k, Filter: filter}, &out)
	if err != nil {
		return nil, err
	}
	res := make([]ports.ScoredVector, len(out.Results))
	for i, r := range out.Results {
		res[i] = ports.ScoredVector{Vector: vectorFrom(r.Vector), Score: r.Score}
	}
	return res, nil
}

// Get implements ports.VectorStore.
func (s VectorStore) Get(ctx context.Context, collection, id string) (ports.Vector, error) {
	if err := text("collection", collection); err != nil {
		return ports.Vector{}, err
	}
	if err := text("id", id); err != nil {
		return ports.Vector{}, err
	}
	var out wire.Vector
	if err := s.c.Call(ctx, vecSubject(wire.VecGet), wire.VecRef{Collection: collection, ID: id}, &out); err != nil {
		return ports.Vector{}, err
	}
	return vectorFrom(out), nil
}

// Delete implements ports.VectorStore.
func (s VectorStore) Delete(ctx context.Context, collection string, ids []string) error {
	if err := text("collection", collection); err != nil {
		return err
	}
	for _, id := range ids {
		if err := text("id", id); err != nil {
			return err
		}
	}
	return s.c.Call(ctx, vecSubject(wire.VecDelete), wire.VecIDs{Collection: collection, IDs: ids}, nil)
}

// Count implements ports.VectorStore.
func (s VectorStore) Count(ctx context.Context, collection string) (int, error) {
	if err := text("collection", collection); err != nil {
		return 0, err
	}
	var out wire.Count
	err := s.c.Call(ctx, vecSubject(wire.VecCount), wire.VecIn{Collection: collection}, &out)
	return out.Count, err
}
