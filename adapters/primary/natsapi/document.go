package natsapi

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// Document serves a ports.DocumentStore as the document service. The
// engines' activity log (wire.ActivityCollection) is read-only to callers.
func Document(docs ports.DocumentStore) Service {
	return Service{
		Name:        ports.ServiceDocument,
		Description: "abi-engine document store",
		Endpoints: []Endpoint{
			{Name: wire.DocEnsureCollection, Handler: JSON(func(ctx context.Context, r wire.DocCollection) (wire.Empty, error) {
				return wire.Empty{}, docs.EnsureCollection(ctx, r.Name)
			})},
			{Name: wire.DocDropCollection, Handler: JSON(func(ctx context.Context, r wire.DocCollection) (wire.Empty, error) {
				if err := writable(r.Name); err != nil {
					return wire.Empty{}, err
				}
				return wire.Empty{}, docs.DropCollection(ctx, r.Name)
			})},
			{Name: wire.DocCollections, Handler: JSON(func(ctx context.Context, _ wire.Empty) (wire.DocCollectionNames, error) {
				names, err := docs.Collections(ctx)
				if names == nil {
					names = []string{}
				}
				return wire.DocCollectionNames{Collections: names}, err
			})},
			{Name: wire.DocPut, Handler: JSON(func(ctx context.Context, r wire.DocWrite) (wire.Document, error) {
				if err := writable(r.Collection); err != nil {
					return wire.Document{}, err
				}
				d, err := docs.Put(ctx, r.Collection, r.ID, r.Data, condOf(r.IfVersion))
				return documentOf(d), err
			})},
			{Name: wire.DocGet, Handler: JSON(func(ctx context.Context, r wire.DocRef) (wire.Document, error) {
				d, err := docs.Get(ctx, r.Collection, r.ID)
				return documentOf(d), err
			})},
			{Name: wire.DocDelete, Handler: JSON(func(ctx context.Context, r wire.DocRemove) (wire.Empty, error) {
				if err := writable(r.Collection); err != nil {
					return wire.Empty{}, err
				}
				return wire.Empty{}, docs.Delete(ctx, r.Collection, r.ID, condOf(r.IfVersion))
			})},
			{Name: wire.DocFind, Handler: listJSON("documents", func(ctx context.Context, r wire.DocQuery) ([]wire.Document, []byte, error) {
				found, next, err := docs.Find(ctx, r.Collection, ports.Query{
					Where: r.Where, OrderBy: r.OrderBy, Desc: r.Desc, Limit: r.Limit, Cursor: r.Cursor,
				})
				page := make([]wire.Document, len(found))
				for i, d := range found {
					page[i] = documentOf(d)
				}
				cursor, _ := json.Marshal(next) // a string always marshals
				return page, append([]byte(`,"cursor":`), cursor...), err
			})},
			{Name: wire.DocCount, Handler: JSON(func(ctx context.Context, r wire.DocWhere) (wire.Count, error) {
				n, err := docs.Count(ctx, r.Collection, r.Where)
				return wire.Count{Count: n}, err
			})},
		},
	}
}

// writable refuses a caller's write to a collection only engines write:
// the activity log, which would otherwise let any member of the account
// forge the record of who held the lease, or erase it.
func writable(collection string) error {
	if collection == wire.ActivityCollection {
		return fmt.Errorf("%w: collection %q is the engines' activity log: callers may read it, not write, delete or drop it",
			ports.ErrInvalidArgument, collection)
	}
	return nil
}

// condOf reads if_version: absent is no condition, present (0 included)
// is the version the stored document must have.
func condOf(v *uint64) ports.Cond {
	if v == nil {
		return ports.Cond{}
	}
	return ports.IfVersion(*v)
}

// documentOf puts a document on the wire; its data is never null, so a
// reader always finds an object.
func documentOf(d ports.Document) wire.Document {
	data := d.Data
	if data == nil {
		data = map[string]any{}
	}
	return wire.Document{ID: d.ID, Version: d.Version, Data: data}
}
