package httpapi

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/abi-engine/engine/internal/strictjson"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

// kvGet answers the value as it is stored.
func (a *api) kvGet(w http.ResponseWriter, r *http.Request) {
	v, err := a.services.KeyValue.Get(r.Context(), r.PathValue("key"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(v)))
	_, _ = w.Write(v)
}

// kvSet stores the body. ?ttl= (a Go duration such as 30s) makes it
// expire; If-None-Match: * writes only if the key is absent, else 409.
// Any other precondition is a 400: a key has no version to match.
func (a *api) kvSet(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	if err := preconditions(r, false, true); err != nil {
		a.fail(w, r, err)
		return
	}
	query, err := keyQuery(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var ttl time.Duration
	// A ttl given empty (?ttl=) is no duration, and refused as one: read
	// as no ttl, it would keep the value for good.
	if given := query["ttl"]; len(given) > 0 {
		s := given[0]
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			a.fail(w, r, fmt.Errorf("%w: ttl %q: want a duration such as 30s", ports.ErrInvalidArgument, s))
			return
		}
		// A duration below a nanosecond ("0.5ns") parses as 0, which keeps
		// the value for good: it is refused as any TTL too small to keep.
		if d == 0 && strings.ContainsAny(s, "123456789") {
			a.fail(w, r, fmt.Errorf("%w: query parameter ttl %q is below %v and would round to zero, which keeps the value forever", ports.ErrInvalidArgument, s, ports.MinTTL))
			return
		}
		if err := storecheck.TTL(d); err != nil {
			a.fail(w, r, fmt.Errorf("query parameter ttl: %w", err))
			return
		}
		ttl = d
	}
	value, release, err := a.readBody(w, r)
	if err != nil {
		a.fail(w, r, fmt.Errorf("read the value of %q: %w", key, err))
		return
	}
	defer release()
	if _, ok := precondition(r, "If-None-Match"); ok { // preconditions let only * through
		ok, err := a.services.KeyValue.SetIfAbsent(r.Context(), key, value, ttl)
		if err == nil && !ok {
			err = fmt.Errorf("set %q if absent: the key exists: %w", key, ports.ErrConflict)
		}
		if err != nil {
			a.fail(w, r, err)
			return
		}
	} else if err := a.services.KeyValue.Set(r.Context(), key, value, ttl); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// keyQuery reads a key PUT's query, which may hold ttl, once, and nothing
// else: a parameter it ignored (a ttl spelt "TTL", a second ttl, an empty
// one) would store the value for good, or for another time than the
// caller asked.
func keyQuery(r *http.Request) (url.Values, error) {
	query, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("%w: query %q: %v", ports.ErrInvalidArgument, r.URL.RawQuery, err)
	}
	for _, name := range slices.Sorted(maps.Keys(query)) {
		switch {
		case name != "ttl":
			return nil, fmt.Errorf("%w: query parameter %q: not taken here; a key's PUT takes ttl alone", ports.ErrInvalidArgument, name)
		case len(query[name]) > 1:
			return nil, fmt.Errorf("%w: query parameter ttl given %d times", ports.ErrInvalidArgument, len(query[name]))
		}
	}
	return query, nil
}

func (a *api) kvDelete(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	if err := preconditions(r, false, false); err != nil {
		a.fail(w, r, err)
		return
	}
	existed, err := a.services.KeyValue.Delete(r.Context(), key)
	if err == nil && !existed {
		err = fmt.Errorf("delete %q: %w", key, ports.ErrNotFound)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// Document is a document as the API shows it; its version is also the
// response's ETag.
type Document struct {
	ID      string         `json:"id"`
	Version uint64         `json:"version"`
	Data    map[string]any `json:"data"`
}

func documentOf(d ports.Document) Document {
	return Document{ID: d.ID, Version: d.Version, Data: d.Data}
}

func (a *api) writeDocument(w http.ResponseWriter, d ports.Document) {
	w.Header().Set("ETag", strconv.Quote(strconv.FormatUint(d.Version, 10)))
	writeJSON(w, http.StatusOK, documentOf(d))
}

func (a *api) docGet(w http.ResponseWriter, r *http.Request) {
	d, err := a.services.Document.Get(r.Context(), r.PathValue("collection"), r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.writeDocument(w, d)
}

// preconditions refuses the precondition headers a write route does not
// evaluate: If-Unmodified-Since always, If-Match unless ifMatch,
// If-None-Match unless ifNoneMatch and it is *, and the two together. Ignored, they would turn a conditional
// write into one that overwrites whatever is stored, where HTTP has a
// server evaluate them before the method runs. A header counts when it is
// present, empty or not (see precondition).
func preconditions(r *http.Request, ifMatch, ifNoneMatch bool) error {
	m, hasM := precondition(r, "If-Match")
	n, hasN := precondition(r, "If-None-Match")
	since, hasSince := precondition(r, "If-Unmodified-Since")
	switch {
	case hasSince:
		return fmt.Errorf("%w: If-Unmodified-Since %q: not taken here; make the write conditional with If-Match and the ETag a GET answers", ports.ErrInvalidArgument, since)
	case hasM && !ifMatch:
		return fmt.Errorf("%w: If-Match %q: this resource has no version to match", ports.ErrInvalidArgument, m)
	case hasN && (!ifNoneMatch || n != "*"):
		if !ifNoneMatch {
			return fmt.Errorf("%w: If-None-Match %q: not taken here", ports.ErrInvalidArgument, n)
		}
		return fmt.Errorf("%w: If-None-Match %q: only * (write only if absent) is taken", ports.ErrInvalidArgument, n)
	case hasM && hasN:
		return fmt.Errorf("%w: If-Match and If-None-Match together", ports.ErrInvalidArgument)
	}
	return nil
}

// precondition is a precondition header as the request carries it: its
// lines joined as the one list HTTP makes of them, and whether it came at
// all. Header.Get reads an empty header as none and a second line not at
// all, so a client whose ETag came out empty would have its conditional
// write run as a plain one.
func precondition(r *http.Request, name string) (string, bool) {
	lines, ok := r.Header[name]
	return strings.Join(lines, ", "), ok
}

// cond reads a document write's condition: If-Match: "<version>" needs
// that version, If-None-Match: * needs the document to be absent.
func cond(r *http.Request) (ports.Cond, error) {
	if err := preconditions(r, true, true); err != nil {
		return ports.Cond{}, err
	}
	if m, ok := precondition(r, "If-Match"); ok {
		v, err := strconv.ParseUint(strings.Trim(m, `"`), 10, 64)
		if err != nil || v == 0 {
			return ports.Cond{}, fmt.Errorf("%w: If-Match %q: want a document version", ports.ErrInvalidArgument, m)
		}
		return ports.IfVersion(v), nil
	}
	if _, ok := precondition(r, "If-None-Match"); ok { // preconditions let only * through
		return ports.IfVersion(0), nil
	}
	return ports.Cond{}, nil
}

// docPut writes the body, a JSON object, as the document's data. A missing
// collection is made on the first write, as a client expects of a REST
// resource; not by a write conditioned on a version, which no document of
// a missing collection has: the collection would outlive the refusal.
func (a *api) docPut(w http.ResponseWriter, r *http.Request) {
	collection, id := r.PathValue("collection"), r.PathValue("id")
	c, err := cond(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var data map[string]any
	release, err := a.decode(w, r, &data)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	defer release()
	if data == nil {
		a.fail(w, r, fmt.Errorf("%w: body: want a JSON object", ports.ErrInvalidArgument))
		return
	}
	docs := a.services.Document
	d, err := docs.Put(r.Context(), collection, id, data, c)
	if errors.Is(err, ports.ErrNotFound) {
		if v, set := c.Version(); set && v > 0 {
			err = fmt.Errorf("put %q in %q at version %d: the collection does not exist: %w", id, collection, v, ports.ErrConflict)
		} else if err = docs.EnsureCollection(r.Context(), collection); err == nil {
			d, err = docs.Put(r.Context(), collection, id, data, c)
		}
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.writeDocument(w, d)
}

func (a *api) docDelete(w http.ResponseWriter, r *http.Request) {
	c, err := cond(r)
	if err == nil {
		err = a.services.Document.Delete(r.Context(), r.PathValue("collection"), r.PathValue("id"), c)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// FindRequest is the body of POST /v1/documents/{collection}/find.
type FindRequest struct {
	Where   map[string]any `json:"where,omitempty"`
	OrderBy string         `json:"order_by,omitempty"`
	Desc    bool           `json:"desc,omitempty"`
	Limit   int            `json:"limit,omitempty"`
	Cursor  string         `json:"cursor,omitempty"`
}

// FindResponse is one page of documents and the next page's cursor, ""
// on the last.
type FindResponse struct {
	Documents []Document `json:"documents"`
	Cursor    string     `json:"cursor"`
}

func (a *api) docFind(w http.ResponseWriter, r *http.Request) {
	var q FindRequest
	release, err := a.decodeQuery(w, r, &q)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	defer release()
	docs, next, err := a.services.Document.Find(r.Context(), r.PathValue("collection"), ports.Query{
		Where: q.Where, OrderBy: q.OrderBy, Desc: q.Desc, Limit: q.Limit, Cursor: q.Cursor,
	})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := FindResponse{Documents: make([]Document, len(docs)), Cursor: next}
	for i, d := range docs {
		out.Documents[i] = documentOf(d)
	}
	writeJSON(w, http.StatusOK, out)
}

// SearchRequest is the body of POST /v1/vectors/{collection}/search; K 0
// means DefaultK.
type SearchRequest struct {
	Vector []float32      `json:"vector"`
	K      int            `json:"k,omitempty"`
	Filter map[string]any `json:"filter,omitempty"`
}

// DefaultK is how many vectors a search without k returns.
const DefaultK = 10

// ScoredVector is one search result.
type ScoredVector struct {
	ID      string         `json:"id"`
	Score   float64        `json:"score"`
	Values  []float32      `json:"values"`
	Payload map[string]any `json:"payload,omitempty"`
}

// SearchResponse lists the results, closest first.
type SearchResponse struct {
	Results []ScoredVector `json:"results"`
}

func (a *api) vecSearch(w http.ResponseWriter, r *http.Request) {
	var q SearchRequest
	release, err := a.decodeQuery(w, r, &q)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	defer release()
	if q.K == 0 {
		q.K = DefaultK
	}
	found, err := a.services.VectorStore.Search(r.Context(), r.PathValue("collection"), q.Vector, q.K, q.Filter)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := SearchResponse{Results: make([]ScoredVector, len(found))}
	for i, v := range found {
		out.Results[i] = ScoredVector{ID: v.ID, Score: v.Score, Values: v.Values, Payload: v.Payload}
	}
	writeJSON(w, http.StatusOK, out)
}

// decode reads one JSON value from the body, refusing unknown fields (a
// known one spelt in another case included), a field given twice, and
// bodies over the limit or of more than wire.MaxValues values. The body
// counts against the API's budget until release, which the handler calls
// once its call has answered.
func (a *api) decode(w http.ResponseWriter, r *http.Request, v any) (release func(), err error) {
	return a.decodeBody(w, r, v, false)
}

// decodeQuery is decode for the body of a find or a search, where a body
// of nothing, or of JSON white space only, is {}: the protocol reads an
// empty body so on NATS, and a query answers the same over either.
func (a *api) decodeQuery(w http.ResponseWriter, r *http.Request, v any) (release func(), err error) {
	return a.decodeBody(w, r, v, true)
}

func (a *api) decodeBody(w http.ResponseWriter, r *http.Request, v any, emptyIsObject bool) (_ func(), err error) {
	data, release, err := a.readBody(w, r)
	if err != nil {
		return nil, err
	}
	decoded := false
	defer func() {
		// A body that failed to decode, or whose decoding panicked, is
		// given back here: the handler releases only what it was handed.
		if !decoded {
			release()
		}
	}()
	if err := decodeJSON(data, v, emptyIsObject); err != nil {
		return nil, err
	}
	decoded = true
	return release, nil
}

func decodeJSON(data []byte, v any, emptyIsObject bool) error {
	if emptyIsObject && wire.Blank(data) {
		data = []byte("{}")
	}
	if err := strictjson.Object(data); err != nil {
		return fmt.Errorf("%w: body: %v", ports.ErrInvalidArgument, err)
	}
	// Counted before anything is decoded, as on NATS: decoding is what
	// costs, and the engine would refuse the call once sent.
	if err := strictjson.Values(data, v, wire.MaxValues); err != nil {
		return fmt.Errorf("%w: body: %v", ports.ErrInvalidArgument, err)
	}
	// A field it does not know is refused by ExactFields, below.
	if err := strictjson.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%w: body: %v", ports.ErrInvalidArgument, err)
	}
	if err := strictjson.ExactFields(data, v); err != nil {
		return fmt.Errorf("%w: body: %v", ports.ErrInvalidArgument, err)
	}
	return nil
}
