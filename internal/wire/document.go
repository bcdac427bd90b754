package wire

// Operations of the document service. A document travels as
// {"id","version","data"}; data is any JSON object, and its numbers come
// back as a JSON reader sees them, float64, exactly as from a local store.
const (
	DocEnsureCollection = "ensure_collection"
	DocDropCollection   = "drop_collection"
	DocCollections      = "collections"
	DocPut              = "put"
	DocGet              = "get"
	DocDelete           = "delete"
	DocFind             = "find"
	DocCount            = "count"
)

// ActivityCollection is the engines' activity log (engine history): who
// acquired, handed over and lost the lease. Engines write it into the
// document store they opened themselves, never through the service, so the
// service refuses every caller's put, delete and drop in it: a caller may
// read the log, and cannot forge or erase an engine's entry.
const ActivityCollection = "activity_log"

// DocCollection names a collection: ensure_collection, drop_collection.
type DocCollection struct {
	Name string `json:"name"`
}

// DocCollectionNames answers collections, sorted.
type DocCollectionNames struct {
	Collections []string `json:"collections"`
}

// DocWrite writes a document: put. IfVersion absent writes whatever is
// stored; present, the stored version must equal it, and 0 means the
// document must not exist yet. null is refused: it is no version, and
// encoding/json alone would read it as absent.
type DocWrite struct {
	Collection string         `json:"collection"`
	ID         string         `json:"id"`
	Data       map[string]any `json:"data"`
	IfVersion  *uint64        `json:"if_version,omitempty" strictjson:"notnull"`
}

// DocRef names a document: get.
type DocRef struct {
	Collection string `json:"collection"`
	ID         string `json:"id"`
}

// DocRemove deletes a document: delete, with IfVersion as in DocWrite.
type DocRemove struct {
	Collection string  `json:"collection"`
	ID         string  `json:"id"`
	IfVersion  *uint64 `json:"if_version,omitempty" strictjson:"notnull"`
}

// Document answers put and get, and is each element of find's answer.
type Document struct {
	ID      string         `json:"id"`
	Version uint64         `json:"version"`
	Data    map[string]any `json:"data"`
}

// DocQuery asks for a page of documents: find. Where keeps the documents
// whose top-level fields equal these JSON values; OrderBy "" orders by id;
// Limit 0 means 100, and so does a negative limit, as the ports read it:
// Go facades of earlier releases send a port's negative limit as it is, and
// an old facade must work with a new engine. Cursor continues a previous
// page.
type DocQuery struct {
	Collection string         `json:"collection"`
	Where      map[string]any `json:"where,omitempty"`
	OrderBy    string         `json:"order_by,omitempty"`
	Desc       bool           `json:"desc,omitempty"`
	Limit      int            `json:"limit,omitempty"`
	Cursor     string         `json:"cursor,omitempty"`
}

// DocPage answers find; Cursor is "" on the last page.
type DocPage struct {
	Documents []Document `json:"documents"`
	Cursor    string     `json:"cursor"`
}

// DocWhere counts documents: count.
type DocWhere struct {
	Collection string         `json:"collection"`
	Where      map[string]any `json:"where,omitempty"`
}

// Count answers count, in the document and vector_store services.
type Count struct {
	Count int `json:"count"`
}
