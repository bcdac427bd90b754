package ports

import "context"

// Document is a JSON object with an id and a version. The version grows on
// every Put and names one state of the document for good: a document
// deleted, or dropped with its collection, and made again starts above
// every version it had, so a writer holding an old one is refused rather
// than overwriting the new document. Versions need not be consecutive.
type Document struct {
	ID      string
	Version uint64
	Data    map[string]any
}

// Cond makes a write conditional on the stored version. The zero Cond is
// unconditional.
type Cond struct {
	set     bool
	version uint64
}

// IfVersion makes a write succeed only if the stored version is v; v 0
// means the document must not exist yet.
func IfVersion(v uint64) Cond { return Cond{set: true, version: v} }

// Version reports the required version and whether there is one.
func (c Cond) Version() (uint64, bool) { return c.version, c.set }

// Query selects documents of a collection.
type Query struct {
	// Where keeps documents whose top-level fields equal these JSON values.
	Where map[string]any
	// OrderBy is a top-level field; "" orders by id. Ties break by id.
	OrderBy string
	// Desc reverses the order.
	Desc bool
	// Limit is the page size; <= 0 means DefaultPage, above MaxPage is
	// ErrInvalidArgument.
	Limit int
	// Cursor continues from a previous page.
	Cursor string
}

// DocumentStore keeps documents in named collections. A collection name is
// 1 to 64 characters of [A-Za-z0-9_-]; a missing collection is ErrNotFound
// for every call but EnsureCollection.
type DocumentStore interface {
	// EnsureCollection creates the collection if it is missing.
	EnsureCollection(ctx context.Context, name string) error
	// DropCollection removes the collection and its documents.
	DropCollection(ctx context.Context, name string) error
	// Collections lists the collections by name.
	Collections(ctx context.Context) ([]string, error)
	// Put writes data under id and returns the stored document with its new
	// version. A failed condition is ErrConflict.
	Put(ctx context.Context, collection, id string, data map[string]any, cond Cond) (Document, error)
	// Get returns the document, or ErrNotFound.
	Get(ctx context.Context, collection, id string) (Document, error)
	// Delete removes the document: ErrNotFound when missing, ErrConflict when
	// the condition fails.
	Delete(ctx context.Context, collection, id string, cond Cond) error
	// Find returns one page of matching documents and the next page's cursor
	// ("" on the last page). The cursor is a place in the order (sort value,
	// then id): while others write between the pages, a document that exists
	// throughout, matches Where throughout and keeps its OrderBy value comes
	// exactly once, in its place; one whose OrderBy value changes may come
	// twice or not at all. A Where or OrderBy field holding a double quote
	// or a backslash is ErrInvalidArgument.
	Find(ctx context.Context, collection string, q Query) ([]Document, string, error)
	// Count counts the documents matching where.
	Count(ctx context.Context, collection string, where map[string]any) (int, error)
}
