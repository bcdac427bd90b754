package natsapi

import (
	"context"
	"fmt"

	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// VectorStore serves a ports.VectorStore as the vector_store service.
func VectorStore(vs ports.VectorStore) Service {
	return Service{
		Name:        ports.ServiceVectorStore,
		Description: "abi-engine vector store",
		Endpoints: []Endpoint{
			{Name: wire.VecCreateCollection, Handler: JSON(func(ctx context.Context, r wire.VecCollection) (wire.Empty, error) {
				return wire.Empty{}, vs.CreateCollection(ctx, r.Name, r.Dimension, ports.Metric(r.Metric))
			})},
			{Name: wire.VecDeleteCollection, Handler: JSON(func(ctx context.Context, r wire.VecName) (wire.Empty, error) {
				return wire.Empty{}, vs.DeleteCollection(ctx, r.Name)
			})},
			{Name: wire.VecCollections, Handler: JSON(func(ctx context.Context, _ wire.Empty) (wire.VecCollectionList, error) {
				cs, err := vs.Collections(ctx)
				out := wire.VecCollectionList{Collections: make([]wire.VecCollectionInfo, len(cs))}
				for i, c := range cs {
					out.Collections[i] = wire.VecCollectionInfo{
						VecCollection: wire.VecCollection{Name: c.Name, Dimension: c.Dimension, Metric: string(c.Metric)},
						Indexed:       c.Indexed,
					}
				}
				return out, err
			})},
			{Name: wire.VecUpsert, Handler: JSON(func(ctx context.Context, r wire.VecWrite) (wire.Empty, error) {
				vectors := make([]ports.Vector, len(r.Vectors))
				for i, v := range r.Vectors {
					values, err := v.Floats()
					if err != nil {
						return wire.Empty{}, fmt.Errorf("upsert into %q: %w", r.Collection, err)
					}
					vectors[i] = ports.Vector{ID: v.ID, Values: values, Payload: v.Payload}
				}
				return wire.Empty{}, vs.Upsert(ctx, r.Collection, vectors)
			})},
			{Name: wire.VecSearch, Handler: listJSON("results", func(ctx context.Context, r wire.VecQuery) ([]wire.ScoredVector, []byte, error) {
				found, err := vs.Search(ctx, r.Collection, r.Vector, r.K, r.Filter)
				out := make([]wire.ScoredVector, len(found))
				for i, s := range found {
					out[i] = wire.ScoredVector{Vector: vectorOf(s.Vector), Score: s.Score}
				}
				return out, nil, err
			})},
			{Name: wire.VecGet, Handler: JSON(func(ctx context.Context, r wire.VecRef) (wire.Vector, error) {
				v, err := vs.Get(ctx, r.Collection, r.ID)
				return vectorOf(v), err
			})},
			{Name: wire.VecDelete, Handler: JSON(func(ctx context.Context, r wire.VecIDs) (wire.Empty, error) {
				return wire.Empty{}, vs.Delete(ctx, r.Collection, r.IDs)
			})},
			{Name: wire.VecCount, Handler: JSON(func(ctx context.Context, r wire.VecIn) (wire.Count, error) {
				n, err := vs.Count(ctx, r.Collection)
				return wire.Count{Count: n}, err
			})},
		},
	}
}

// vectorOf puts a vector on the wire; its values are never null.
func vectorOf(v ports.Vector) wire.Vector {
	values := v.Values
	if values == nil {
		values = []float32{}
	}
	return wire.Vector{ID: v.ID, Values: values, Payload: v.Payload}
}
