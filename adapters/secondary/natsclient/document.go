package natsclient

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

// Document is the document service of the serving engine.
type Document struct{ c *Client }

var _ ports.DocumentStore = Document{}

// NewDocument calls the document service through c.
func NewDocument(c *Client) Document { return Document{c: c} }

func docSubject(op string) string { return wire.Subject(ports.ServiceDocument, op) }

// callEncoded encodes req here rather than in Call, so a value JSON cannot
// carry (NaN, a channel, text that is not UTF-8, which encoding/json would
// send as U+FFFD) is the caller's invalid argument, as a local store says,
// and not a failed call or other text stored. It then goes the way Call goes, through
// exchange: a body past one message is uploaded and an answer past one is
// parked and fetched (a large document or batch, a search at k = MaxK).
func callEncoded(ctx context.Context, c *Client, subject string, req, resp any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("%s: %w: the request is not JSON: %v", subject, ports.ErrInvalidArgument, err)
	}
	if err := storecheck.Marshaled(subject+": the request", data); err != nil {
		return err
	}
	answer, err := c.exchange(ctx, subject, data)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(answer, resp); err != nil {
		return fmt.Errorf("%s: decode the answer: %w", subject, err)
	}
	return nil
}

// texts checks every map key as text(), since JSON would alter a key that
// is not UTF-8 the same way.
func texts(field string, m map[string]any) error {
	for k := range m {
		if err := text(field, k); err != nil {
			return err
		}
	}
	return nil
}

func versionOf(cond ports.Cond) *uint64 {
	if v, ok := cond.Version(); ok {
		return &v
	}
	return nil
}

func documentFrom(d wire.Document) ports.Document {
	return ports.Document{ID: d.ID, Version: d.Version, Data: d.Data}
}

// EnsureCollection implements ports.DocumentStore.
func (d Document) EnsureCollection(ctx context.Context, name string) error {
	if err := text("collection", name); err != nil {
		return err
	}
	return d.c.Call(ctx, docSubject(wire.DocEnsureCollection), wire.DocCollection{Name: name}, nil)
}

// DropCollection implements ports.DocumentStore.
func (d Document) DropCollection(ctx context.Context, name string) error {
	if err := text("collection", name); err != nil {
		return err
	}
	return d.c.Call(ctx, docSubject(wire.DocDropCollection), wire.DocCollection{Name: name}, nil)
}

// Collections implements ports.DocumentStore.
func (d Document) Collections(ctx context.Context) ([]string, error) {
	var out wire.DocCollectionNames
	err := d.c.Call(ctx, docSubject(wire.DocCollections), wire.Empty{}, &out)
	return out.Collections, err
}

// Put implements ports.DocumentStore.
func (d Document) Put(ctx context.Context, collection, id string, data map[string]any, cond ports.Cond) (ports.Document, error) {
	if err := docRef(collection, id); err != nil {
		return ports.Document{}, err
	}
	var out wire.Document
	err := callEncoded(ctx, d.c, docSubject(wire.DocPut), wire.DocWrite{Collection: collection, ID: id, Data: data, IfVersion: versionOf(cond)}, &out)
	if err != nil {
		return ports.Document{}, err
	}
	return documentFrom(out), nil
}

// Get implements ports.DocumentStore.
func (d Document) Get(ctx context.Context, collection, id string) (ports.Document, error) {
	if err := docRef(collection, id); err != nil {
		return ports.Document{}, err
	}
	var out wire.Document
	if err := d.c.Call(ctx, docSubject(wire.DocGet), wire.DocRef{Collection: collection, ID: id}, &out); err != nil {
		return ports.Document{}, err
	}
	return documentFrom(out), nil
}

// Delete implements ports.DocumentStore.
func (d Document) Delete(ctx context.Context, collection, id string, cond ports.Cond) error {
	if err := docRef(collection, id); err != nil {
		return err
	}
	return d.c.Call(ctx, docSubject(wire.DocDelete), wire.DocRemove{Collection: collection, ID: id, IfVersion: versionOf(cond)}, nil)
}

// Find implements ports.DocumentStore.
func (d Document) Find(ctx context.Context, collection string, q ports.Query) ([]ports.Document, string, error) {
	if err := text("collection", collection); err != nil {
		return nil, "", err
	}
	if err := texts("where field", q.Where); err != nil {
		return nil, "", err
	}
	if err := text("order_by", q.OrderBy); err != nil {
		return nil, "", err
	}
	if err := text("cursor", q.Cursor); err != nil {
		return nil, "", err
	}
	// The port reads any limit <= 0 as the default page; it is sent as 0,
	// the protocol's form of it.
	var out wire.DocPage
	err := callEncoded(ctx, d.c, docSubject(wire.DocFind), wire.DocQuery{
		Collection: collection, Where: q.Where, OrderBy: q.OrderBy, Desc: q.Desc, Limit: max(q.Limit, 0), Cursor: q.Cursor,
	}, &out)
	if err != nil {
		return nil, "", err
	}
	docs := make([]ports.Document, len(out.Documents))
	for i, doc := range out.Documents {
		docs[i] = documentFrom(doc)
	}
	return docs, out.Cursor, nil
}

// Count implements ports.DocumentStore.
func (d Document) Count(ctx context.Context, collection string, where map[string]any) (int, error) {
	if err := text("collection", collection); err != nil {
		return 0, err
	}
	if err := texts("where field", where); err != nil {
		return 0, err
	}
	var out wire.Count
	err := callEncoded(ctx, d.c, docSubject(wire.DocCount), wire.DocWhere{Collection: collection, Where: where}, &out)
	return out.Count, err
}

func docRef(collection, id string) error {
	if err := text("collection", collection); err != nil {
		return err
	}
	return text("id", id)
}
