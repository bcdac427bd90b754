package httpapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	httpapi "github.com/abi-engine/engine/adapters/primary/http"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

func TestKeyValue(t *testing.T) {
	_, services := kernel(t, nil)
	a := serveAPI(t, services, httpapi.Options{MaxBody: 1024})
	for _, key := range []string{"plain", "with/slashes/in it", "ünï cödé"} {
		path := "/v1/kv/" + url.PathEscape(key)
		if strings.Contains(key, "/") {
			path = "/v1/kv/with/slashes/in%20it"
		}
		resp, body := a.expect(http.StatusNotFound, "GET", path, "")
		errorOf(t, resp, body)
		a.expect(http.StatusNoContent, "PUT", path, "value of "+key)
		resp, got := a.expect(http.StatusOK, "GET", path, "")
		if got != "value of "+key || resp.Header.Get("Content-Type") != "application/octet-stream" {
			t.Fatalf("GET %s: %q (%s)", path, got, resp.Header.Get("Content-Type"))
		}
		if v, err := services.KeyValue.Get(t.Context(), key); err != nil || string(v) != "value of "+key {
			t.Fatalf("the store holds %q, %v under %q", v, err, key)
		}
		a.expect(http.StatusNoContent, "DELETE", path, "")
		resp, body = a.expect(http.StatusNotFound, "DELETE", path, "")
		errorOf(t, resp, body)
	}

	a.expect(http.StatusNoContent, "PUT", "/v1/kv/once", "first", "If-None-Match", "*")
	resp, body := a.expect(http.StatusConflict, "PUT", "/v1/kv/once", "second", "If-None-Match", "*")
	errorOf(t, resp, body)
	if _, got := a.expect(http.StatusOK, "GET", "/v1/kv/once", ""); got != "first" {
		t.Fatalf("a refused If-None-Match write changed the value to %q", got)
	}

	a.expect(http.StatusNoContent, "PUT", "/v1/kv/short?ttl=1s", "gone soon")
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, _ := a.do("GET", "/v1/kv/short", nil)
		if resp.StatusCode == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a key set with ttl=1s still answers %d after 20s", resp.StatusCode)
		}
		time.Sleep(100 * time.Millisecond)
	}

	for _, ttl := range []string{"soon", "-1s"} {
		resp, body := a.expect(http.StatusBadRequest, "PUT", "/v1/kv/k?ttl="+ttl, "v")
		if msg := errorOf(t, resp, body); !strings.Contains(msg, "ttl") {
			t.Fatalf("ttl=%s: %q", ttl, msg)
		}
	}
	resp, body = a.expect(http.StatusBadRequest, "GET", "/v1/kv/", "")
	errorOf(t, resp, body)
	resp, body = a.expect(http.StatusRequestEntityTooLarge, "PUT", "/v1/kv/big", strings.Repeat("x", 1025))
	errorOf(t, resp, body)
	a.expect(http.StatusNoContent, "PUT", "/v1/kv/just-fits", strings.Repeat("x", 1024))
}

// document decodes a document answer and checks its ETag is its version.
func document(t *testing.T, resp *http.Response, body string) httpapi.Document {
	t.Helper()
	var d httpapi.Document
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatalf("document %q: %v", body, err)
	}
	if want := `"` + jsonNumber(d.Version) + `"`; resp.Header.Get("ETag") != want {
		t.Fatalf("ETag %q for version %d", resp.Header.Get("ETag"), d.Version)
	}
	return d
}

func jsonNumber(v uint64) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestDocuments(t *testing.T) {
	_, services := kernel(t, nil)
	a := serveAPI(t, services, httpapi.Options{MaxBody: 4096})
	doc := func(resp *http.Response, body string) httpapi.Document { return document(t, resp, body) }
	resp, body := a.expect(http.StatusNotFound, "GET", "/v1/documents/people/ada", "")
	errorOf(t, resp, body)

	// The first write makes the collection.
	d := doc(a.expect(http.StatusOK, "PUT", "/v1/documents/people/ada", `{"name":"Ada","born":1815}`))
	if d.ID != "ada" || d.Version == 0 || d.Data["name"] != "Ada" {
		t.Fatalf("PUT answered %+v", d)
	}
	got := doc(a.expect(http.StatusOK, "GET", "/v1/documents/people/ada", ""))
	if got.Version != d.Version || got.Data["born"] != float64(1815) {
		t.Fatalf("GET answered %+v after PUT %+v", got, d)
	}

	stale := `"` + jsonNumber(d.Version) + `"`
	d2 := doc(a.expect(http.StatusOK, "PUT", "/v1/documents/people/ada", `{"name":"Ada Lovelace"}`, "If-Match", stale))
	if d2.Version <= d.Version {
		t.Fatalf("version %d after %d", d2.Version, d.Version)
	}
	resp, body = a.expect(http.StatusConflict, "PUT", "/v1/documents/people/ada", `{"name":"lost update"}`, "If-Match", stale)
	errorOf(t, resp, body)
	resp, body = a.expect(http.StatusConflict, "PUT", "/v1/documents/people/ada", `{}`, "If-None-Match", "*")
	errorOf(t, resp, body)
	resp, body = a.expect(http.StatusConflict, "DELETE", "/v1/documents/people/ada", "", "If-Match", stale)
	errorOf(t, resp, body)

	for _, bad := range []string{`[1,2]`, `{"a":`, `{} {}`, `null`} {
		resp, body := a.expect(http.StatusBadRequest, "PUT", "/v1/documents/people/x", bad)
		errorOf(t, resp, body)
	}
	resp, body = a.expect(http.StatusBadRequest, "PUT", "/v1/documents/people/x", `{}`, "If-Match", "v1")
	errorOf(t, resp, body)
	resp, body = a.expect(http.StatusBadRequest, "PUT", "/v1/documents/not%20a%20name/x", `{}`)
	errorOf(t, resp, body)
	resp, body = a.expect(http.StatusRequestEntityTooLarge, "PUT", "/v1/documents/people/x", `{"a":"`+strings.Repeat("x", 4096)+`"}`)
	errorOf(t, resp, body)

	for _, p := range []struct {
		id   string
		born int
	}{{"grace", 1906}, {"alan", 1912}, {"edsger", 1930}} {
		a.expect(http.StatusOK, "PUT", "/v1/documents/people/"+p.id, `{"born":`+jsonNumber(uint64(p.born))+`,"kind":"pioneer"}`)
	}
	var page httpapi.FindResponse
	_, body = a.expect(http.StatusOK, "POST", "/v1/documents/people/find", `{"where":{"kind":"pioneer"},"order_by":"born","desc":true,"limit":2}`)
	if err := json.Unmarshal([]byte(body), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Documents) != 2 || page.Documents[0].ID != "edsger" || page.Documents[1].ID != "alan" || page.Cursor == "" {
		t.Fatalf("first page: %s", body)
	}
	next, _ := json.Marshal(httpapi.FindRequest{Where: map[string]any{"kind": "pioneer"}, OrderBy: "born", Desc: true, Limit: 2, Cursor: page.Cursor})
	_, body = a.expect(http.StatusOK, "POST", "/v1/documents/people/find", string(next))
	page = httpapi.FindResponse{}
	if err := json.Unmarshal([]byte(body), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Documents) != 1 || page.Documents[0].ID != "grace" || page.Cursor != "" {
		t.Fatalf("last page: %s", body)
	}
	resp, body = a.expect(http.StatusBadRequest, "POST", "/v1/documents/people/find", `{"wher":{}}`)
	errorOf(t, resp, body)
	// A known field spelt in another case, or given twice, is as unknown.
	for _, bad := range []string{`{"Where":{}}`, `{"limit":1,"limit":2}`} {
		resp, body = a.expect(http.StatusBadRequest, "POST", "/v1/documents/people/find", bad)
		errorOf(t, resp, body)
	}
	resp, body = a.expect(http.StatusNotFound, "POST", "/v1/documents/nobody/find", `{}`)
	errorOf(t, resp, body)

	a.expect(http.StatusNoContent, "DELETE", "/v1/documents/people/ada", "", "If-Match", `"`+jsonNumber(d2.Version)+`"`)
	resp, body = a.expect(http.StatusNotFound, "DELETE", "/v1/documents/people/ada", "")
	errorOf(t, resp, body)
	// A document whose id is "find" is reachable with every method but POST.
	a.expect(http.StatusOK, "PUT", "/v1/documents/people/find", `{"odd":true}`)
	doc(a.expect(http.StatusOK, "GET", "/v1/documents/people/find", ""))
}

// A body is one JSON value and nothing after it but white space: a stray
// closing bracket or brace after it is a 400 and writes nothing, not a
// body read as the object before it.
func TestAStrayBracketAfterTheBodyIsABadRequest(t *testing.T) {
	_, services := kernel(t, nil)
	a := serveAPI(t, services, httpapi.Options{MaxBody: 4096})
	for _, tail := range []string{"]", "}", " ]]"} {
		resp, body := a.expect(http.StatusBadRequest, "PUT", "/v1/documents/people/ada", `{"name":"Ada"}`+tail)
		if msg := errorOf(t, resp, body); !strings.Contains(msg, "after the JSON value") {
			t.Errorf("PUT with %q after the object: %q, want it to say what follows the JSON value", tail, msg)
		}
		resp, body = a.expect(http.StatusBadRequest, "POST", "/v1/documents/people/find", `{"limit":1}`+tail)
		errorOf(t, resp, body)
	}
	resp, body := a.expect(http.StatusNotFound, "GET", "/v1/documents/people/ada", "")
	errorOf(t, resp, body)
}

// A document whose data holds a string or a name that is not UTF-8 is a
// 400: encoding/json alone would store U+FFFD in its place, data the
// caller never sent.
func TestADocumentThatIsNotUTF8IsABadRequest(t *testing.T) {
	_, services := kernel(t, nil)
	a := serveAPI(t, services, httpapi.Options{MaxBody: 4096})
	for _, bad := range []string{"{\"name\":\"Ad\xffa\"}", `{"name":"Ad\udc00a"}`, "{\"n\xffame\":1}", `{"list":["ok","\ud800"]}`} {
		resp, body := a.expect(http.StatusBadRequest, "PUT", "/v1/documents/people/ada", bad)
		if msg := errorOf(t, resp, body); !strings.Contains(msg, "not UTF-8") {
			t.Errorf("PUT %q: %q, want it to say what is not UTF-8", bad, msg)
		}
	}
	resp, body := a.expect(http.StatusNotFound, "GET", "/v1/documents/people/ada", "")
	errorOf(t, resp, body)
}

// A ttl below a nanosecond ("0.5ns") parses as the duration 0, which keeps
// the value for good: it is a 400, as every TTL too small to keep is, and
// stores nothing. "0s" is still no expiry.
func TestATTLBelowANanosecondIsABadRequestNotForever(t *testing.T) {
	_, services := kernel(t, nil)
	a := serveAPI(t, services, httpapi.Options{MaxBody: 1024})
	for _, ttl := range []string{"0.5ns", "0.9ns", "0.000001us"} {
		resp, body := a.expect(http.StatusBadRequest, "PUT", "/v1/kv/k?ttl="+ttl, "v")
		if msg := errorOf(t, resp, body); !strings.Contains(msg, "ttl") {
			t.Errorf("ttl=%s: %q, want it to name the ttl", ttl, msg)
		}
		resp, body = a.expect(http.StatusNotFound, "GET", "/v1/kv/k", "")
		errorOf(t, resp, body)
	}
	a.expect(http.StatusNoContent, "PUT", "/v1/kv/k?ttl=0s", "v")
	a.expect(http.StatusOK, "GET", "/v1/kv/k", "")
}

// A find's body is a JSON object: null is a 400, not the query with every
// field left out, which encoding/json alone makes of it.
func TestAFindWhoseBodyIsNullIsABadRequest(t *testing.T) {
	_, services := kernel(t, nil)
	a := serveAPI(t, services, httpapi.Options{MaxBody: 4096})
	a.expect(http.StatusOK, "PUT", "/v1/documents/people/ada", `{"name":"Ada"}`)
	for _, bad := range []string{"null", " null ", "[]"} {
		resp, body := a.expect(http.StatusBadRequest, "POST", "/v1/documents/people/find", bad)
		if msg := errorOf(t, resp, body); !strings.Contains(msg, "want a JSON object") {
			t.Errorf("find with the body %q: %q, want it to say an object is wanted", bad, msg)
		}
	}
	a.expect(http.StatusOK, "POST", "/v1/documents/people/find", `{}`)
}

// A precondition a route does not evaluate is a 400 that writes nothing.
// HTTP has a server evaluate If-Match before the method runs; ignored, a
// client's compare-and-set would overwrite or delete whatever is stored.
// Keys have no versions to match, deletes of keys and objects take no
// condition, and If-None-Match is taken only as * (write if absent).
func TestAPreconditionTheRouteDoesNotEvaluateIsRefused(t *testing.T) {
	_, services := kernel(t, nil)
	a := serveAPI(t, services, httpapi.Options{MaxBody: 4096})
	doc := func(resp *http.Response, body string) httpapi.Document { return document(t, resp, body) }
	a.expect(http.StatusNoContent, "PUT", "/v1/kv/k", "first")
	d := doc(a.expect(http.StatusOK, "PUT", "/v1/documents/people/ada", `{"name":"Ada"}`))
	a.expect(http.StatusOK, "PUT", "/v1/objects/o", "object")
	stale := `"` + jsonNumber(d.Version+1) + `"`
	for _, c := range []struct{ method, path, body, header, value string }{
		{"PUT", "/v1/kv/k", "second", "If-Match", `"1"`},
		{"PUT", "/v1/kv/k", "second", "If-None-Match", `"1"`},
		{"DELETE", "/v1/kv/k", "", "If-Match", `"1"`},
		{"DELETE", "/v1/kv/k", "", "If-None-Match", "*"},
		{"PUT", "/v1/documents/people/ada", `{"name":"lost"}`, "If-None-Match", stale},
		{"DELETE", "/v1/documents/people/ada", "", "If-None-Match", stale},
		{"PUT", "/v1/objects/o", "lost", "If-None-Match", `"x"`},
		{"DELETE", "/v1/objects/o", "", "If-Match", `"x"`},
	} {
		resp, body := a.expect(http.StatusBadRequest, c.method, c.path, c.body, c.header, c.value)
		if msg := errorOf(t, resp, body); !strings.Contains(msg, c.header) {
			t.Errorf("%s %s with %s: %s: %q, want it to name the header", c.method, c.path, c.header, c.value, msg)
		}
	}
	if _, got := a.expect(http.StatusOK, "GET", "/v1/kv/k", ""); got != "first" {
		t.Fatalf("the key holds %q after refused writes", got)
	}
	if got := doc(a.expect(http.StatusOK, "GET", "/v1/documents/people/ada", "")); got.Version != d.Version {
		t.Fatalf("the document is at version %d after refused writes, want %d", got.Version, d.Version)
	}
	if _, got := a.expect(http.StatusOK, "GET", "/v1/objects/o", ""); got != "object" {
		t.Fatalf("the object holds %q after refused writes", got)
	}
}

func TestVectorSearch(t *testing.T) {
	_, services := kernel(t, nil)
	a := serveAPI(t, services, httpapi.Options{})
	ctx := t.Context()
	if err := services.VectorStore.CreateCollection(ctx, "docs", 2, ports.MetricCosine); err != nil {
		t.Fatal(err)
	}
	if err := services.VectorStore.Upsert(ctx, "docs", []ports.Vector{
		{ID: "east", Values: []float32{1, 0}, Payload: map[string]any{"lang": "en"}},
		{ID: "north", Values: []float32{0, 1}, Payload: map[string]any{"lang": "en"}},
		{ID: "northeast", Values: []float32{0.7, 0.7}, Payload: map[string]any{"lang": "fr"}},
	}); err != nil {
		t.Fatal(err)
	}
	search := func(body string) httpapi.SearchResponse {
		t.Helper()
		_, got := a.expect(http.StatusOK, "POST", "/v1/vectors/docs/search", body)
		var r httpapi.SearchResponse
		if err := json.Unmarshal([]byte(got), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := search(`{"vector":[1,0.1],"k":2}`)
	if len(r.Results) != 2 || r.Results[0].ID != "east" || r.Results[1].ID != "northeast" || r.Results[0].Score < r.Results[1].Score {
		t.Fatalf("k=2: %+v", r)
	}
	if r := search(`{"vector":[1,0.1]}`); len(r.Results) != 3 {
		t.Fatalf("no k gives %d results, want all 3 (the default is %d)", len(r.Results), httpapi.DefaultK)
	}
	if r := search(`{"vector":[1,0.1],"filter":{"lang":"en"},"k":5}`); len(r.Results) != 2 || r.Results[0].Payload["lang"] != "en" {
		t.Fatalf("filtered: %+v", r)
	}
	resp, body := a.expect(http.StatusBadRequest, "POST", "/v1/vectors/docs/search", `{"vector":[1,0,0]}`)
	if msg := errorOf(t, resp, body); !strings.Contains(msg, "dimension") {
		t.Fatalf("a wrong dimension: %q", msg)
	}
	resp, body = a.expect(http.StatusNotFound, "POST", "/v1/vectors/nothing/search", `{"vector":[1,0]}`)
	errorOf(t, resp, body)
	resp, body = a.expect(http.StatusBadRequest, "POST", "/v1/vectors/docs/search", `{"vector":"up"}`)
	errorOf(t, resp, body)
}

// A find's limit of 0, none or a negative number is the default page, as
// on NATS, where an old Go facade sends a port's negative limit as it is:
// one query answers the same over either.
func TestAFindWithANegativeLimitIsTheDefaultPage(t *testing.T) {
	_, services := kernel(t, nil)
	a := serveAPI(t, services, httpapi.Options{MaxBody: 4096})
	for i := range ports.DefaultPage + 1 {
		a.expect(http.StatusOK, "PUT", fmt.Sprintf("/v1/documents/people/p%03d", i), `{"name":"Ada"}`)
	}
	for _, body := range []string{`{"limit":-5}`, `{"limit":0}`, `{}`} {
		_, got := a.expect(http.StatusOK, "POST", "/v1/documents/people/find", body)
		var page httpapi.FindResponse
		if err := json.Unmarshal([]byte(got), &page); err != nil {
			t.Fatalf("find %s: %q: %v", body, got, err)
		}
		if len(page.Documents) != ports.DefaultPage || page.Cursor == "" {
			t.Errorf("find %s answered %d documents and cursor %q, want %d and a cursor to the rest", body, len(page.Documents), page.Cursor, ports.DefaultPage)
		}
	}
}

// A find's or a search's body of nothing, or of JSON white space only, is
// read as {}, as the protocol reads any empty body on NATS: the same query
// answers the same over either.
func TestAnEmptyQueryBodyIsReadAsAnEmptyObject(t *testing.T) {
	_, services := kernel(t, nil)
	a := serveAPI(t, services, httpapi.Options{MaxBody: 4096})
	a.expect(http.StatusOK, "PUT", "/v1/documents/people/ada", `{"name":"Ada"}`)
	if err := services.VectorStore.CreateCollection(t.Context(), "docs", 2, ports.MetricCosine); err != nil {
		t.Fatal(err)
	}
	_, want := a.expect(http.StatusOK, "POST", "/v1/documents/people/find", `{}`)
	wantResp, wantSearch := a.expect(http.StatusBadRequest, "POST", "/v1/vectors/docs/search", `{}`)
	wantMsg := errorOf(t, wantResp, wantSearch)
	for _, empty := range []string{"", " \r\n\t"} {
		if _, got := a.expect(http.StatusOK, "POST", "/v1/documents/people/find", empty); got != want {
			t.Errorf("find with the body %q = %s, want %s as for {}", empty, got, want)
		}
		resp, body := a.expect(http.StatusBadRequest, "POST", "/v1/vectors/docs/search", empty)
		if msg := errorOf(t, resp, body); msg != wantMsg {
			t.Errorf("search with the body %q: %q, want %q as for {}", empty, msg, wantMsg)
		}
	}
}

// A key's PUT takes one query parameter, ttl, once. Any other (a ttl
// spelt "TTL" or "expires") or a second ttl is a 400 naming it that stores
// nothing: ignored, it stored the value for good, or for the first of two
// TTLs, where the caller asked for another.
func TestAKeyPutWithAQueryParameterItDoesNotTakeIsRefused(t *testing.T) {
	_, services := kernel(t, nil)
	a := serveAPI(t, services, httpapi.Options{MaxBody: 1024})
	for query, name := range map[string]string{
		"TTL=1s":        "TTL",
		"expires=1s":    "expires",
		"ttl=1h&ttl=1s": "ttl",
	} {
		resp, body := a.expect(http.StatusBadRequest, "PUT", "/v1/kv/k?"+query, "v")
		if msg := errorOf(t, resp, body); !strings.Contains(msg, name) {
			t.Errorf("PUT ?%s: %q, want it to name %s", query, msg, name)
		}
		resp, body = a.expect(http.StatusNotFound, "GET", "/v1/kv/k", "")
		errorOf(t, resp, body)
	}
	a.expect(http.StatusNoContent, "PUT", "/v1/kv/k?ttl=1h", "v")
}

// A precondition header that is present counts, even empty or on several
// lines. Header.Get reads an empty If-Match as no header and a second line
// not at all, so a client whose ETag came out empty (If-Match: with
// nothing after it) had its compare-and-set run as a plain write: the
// document, the object or the key was overwritten or deleted whatever it
// held. Each such request is a 400 naming the header that changes nothing.
func TestAnEmptyOrRepeatedPreconditionHeaderIsRefusedAndChangesNothing(t *testing.T) {
	_, services := kernel(t, nil)
	a := serveAPI(t, services, httpapi.Options{MaxBody: 4096})
	doc := func(resp *http.Response, body string) httpapi.Document { return document(t, resp, body) }
	a.expect(http.StatusNoContent, "PUT", "/v1/kv/k", "first")
	d := doc(a.expect(http.StatusOK, "PUT", "/v1/documents/people/ada", `{"name":"Ada"}`))
	a.expect(http.StatusOK, "PUT", "/v1/objects/o", "object")
	current := `"` + jsonNumber(d.Version) + `"`
	for _, c := range []struct {
		method, path, body, header string
		values                     []string
	}{
		{"PUT", "/v1/documents/people/ada", `{"name":"lost"}`, "If-Match", []string{""}},
		{"PUT", "/v1/documents/people/ada", `{"name":"lost"}`, "If-Match", []string{"", current}},
		{"PUT", "/v1/documents/people/ada", `{"name":"lost"}`, "If-None-Match", []string{""}},
		{"DELETE", "/v1/documents/people/ada", "", "If-Match", []string{""}},
		{"PUT", "/v1/objects/o", "lost", "If-Match", []string{""}},
		{"PUT", "/v1/objects/o", "lost", "If-None-Match", []string{""}},
		{"DELETE", "/v1/objects/o", "", "If-Match", []string{""}},
		{"PUT", "/v1/kv/k", "lost", "If-Match", []string{""}},
		{"PUT", "/v1/kv/k", "lost", "If-None-Match", []string{""}},
		{"PUT", "/v1/kv/k", "lost", "If-None-Match", []string{"", "*"}},
		{"DELETE", "/v1/kv/k", "", "If-Match", []string{""}},
	} {
		var body io.Reader
		if c.body != "" {
			body = strings.NewReader(c.body)
		}
		req, err := http.NewRequestWithContext(t.Context(), c.method, a.url+c.path, body)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range c.values {
			req.Header.Add(c.header, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", c.method, c.path, err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(got), c.header) {
			t.Errorf("%s %s with %s %q answered %d %s, want 400 naming the header", c.method, c.path, c.header, c.values, resp.StatusCode, got)
		}
	}
	if _, got := a.expect(http.StatusOK, "GET", "/v1/kv/k", ""); got != "first" {
		t.Errorf("the key holds %q after refused writes", got)
	}
	if got := doc(a.expect(http.StatusOK, "GET", "/v1/documents/people/ada", "")); got.Version != d.Version {
		t.Errorf("the document is at version %d after refused writes, want %d", got.Version, d.Version)
	}
	if _, got := a.expect(http.StatusOK, "GET", "/v1/objects/o", ""); got != "object" {
		t.Errorf("the object holds %q after refused writes", got)
	}
}

// A key PUT's ttl given empty (?ttl=, or ?ttl alone) is a 400 naming it
// that stores nothing, as engine kv set refuses --ttl "". Read as no ttl
// at all, it stored the value for good where the client (one whose
// duration came out empty) had asked for it to expire.
func TestAKeyPutWithAnEmptyTTLIsRefused(t *testing.T) {
	_, services := kernel(t, nil)
	a := serveAPI(t, services, httpapi.Options{MaxBody: 1024})
	for _, query := range []string{"ttl=", "ttl"} {
		resp, body := a.expect(http.StatusBadRequest, "PUT", "/v1/kv/k?"+query, "v")
		if msg := errorOf(t, resp, body); !strings.Contains(msg, "ttl") {
			t.Errorf("PUT ?%s: %q, want it to name ttl", query, msg)
		}
		resp, body = a.expect(http.StatusNotFound, "GET", "/v1/kv/k", "")
		errorOf(t, resp, body)
	}
	a.expect(http.StatusNoContent, "PUT", "/v1/kv/k", "v")
}

// If-Unmodified-Since is a precondition no write route evaluates, so a
// write or delete carrying it is a 400 naming it that changes nothing, as
// for If-Match where a route has no version. Ignored, it turned a
// client's "only if nobody wrote since" into a write over whatever is
// stored.
func TestAWriteWithIfUnmodifiedSinceIsRefusedAndChangesNothing(t *testing.T) {
	_, services := kernel(t, nil)
	a := serveAPI(t, services, httpapi.Options{MaxBody: 4096})
	doc := func(resp *http.Response, body string) httpapi.Document { return document(t, resp, body) }
	a.expect(http.StatusNoContent, "PUT", "/v1/kv/k", "first")
	d := doc(a.expect(http.StatusOK, "PUT", "/v1/documents/people/ada", `{"name":"Ada"}`))
	a.expect(http.StatusOK, "PUT", "/v1/objects/o", "object")
	long := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).Format(http.TimeFormat)
	for _, c := range []struct{ method, path, body string }{
		{"PUT", "/v1/kv/k", "lost"},
		{"DELETE", "/v1/kv/k", ""},
		{"PUT", "/v1/documents/people/ada", `{"name":"lost"}`},
		{"DELETE", "/v1/documents/people/ada", ""},
		{"PUT", "/v1/objects/o", "lost"},
		{"DELETE", "/v1/objects/o", ""},
	} {
		resp, body := a.expect(http.StatusBadRequest, c.method, c.path, c.body, "If-Unmodified-Since", long)
		if msg := errorOf(t, resp, body); !strings.Contains(msg, "If-Unmodified-Since") {
			t.Errorf("%s %s: %q, want it to name If-Unmodified-Since", c.method, c.path, msg)
		}
	}
	if _, got := a.expect(http.StatusOK, "GET", "/v1/kv/k", ""); got != "first" {
		t.Errorf("the key holds %q after refused writes", got)
	}
	if got := doc(a.expect(http.StatusOK, "GET", "/v1/documents/people/ada", "")); got.Version != d.Version {
		t.Errorf("the document is at version %d after refused writes, want %d", got.Version, d.Version)
	}
	if _, got := a.expect(http.StatusOK, "GET", "/v1/objects/o", ""); got != "object" {
		t.Errorf("the object holds %q after refused writes", got)
	}
}

// A path with an empty, "." or ".." segment is refused with a 400 that
// says how to write such a key, and changes nothing. Before, the mux
// answered 307 to the path cleaned, which names another key, object or
// document, and a client that follows redirects (Go's does, body and
// method kept) wrote or deleted that one: a PUT to a//b set a/b, and a
// DELETE of x/. deleted x. Percent-encoded, such a key is taken as it is.
func TestAPathWithAnEmptyOrDotSegmentIsRefusedNotRedirectedToAnother(t *testing.T) {
	services := memoryServices(t)
	ctx := t.Context()
	a := serveAPI(t, services, httpapi.Options{})
	for _, key := range []string{"a/b", "b", "x"} {
		if err := services.KeyValue.Set(ctx, key, []byte("kept"), 0); err != nil {
			t.Fatal(err)
		}
		if _, err := services.ObjectStorage.Put(ctx, key, strings.NewReader("kept"), ports.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, path := range []string{"/v1/kv/a//b", "/v1/kv/a/../b", "/v1/kv/x/.", "/v1/kv/./b", "/v1/objects/a//b", "/v1/objects/x/."} {
		for _, method := range []string{"PUT", "DELETE"} {
			resp, body := a.expect(http.StatusBadRequest, method, path, "replaced")
			if msg := errorOf(t, resp, body); !strings.Contains(msg, "%2F") {
				t.Fatalf("%s %s: %q does not say how to write such a key", method, path, msg)
			}
		}
	}
	for _, key := range []string{"a/b", "b", "x"} {
		if v, err := services.KeyValue.Get(ctx, key); err != nil || string(v) != "kept" {
			t.Fatalf("key %q holds %q, %v after refused writes to other keys", key, v, err)
		}
		body, _, err := services.ObjectStorage.Get(ctx, key, ports.GetObjectOptions{})
		if err != nil {
			t.Fatalf("object %q: %v after refused writes to other objects", key, err)
		}
		got, _ := io.ReadAll(body)
		_ = body.Close()
		if string(got) != "kept" {
			t.Fatalf("object %q holds %q after refused writes to other objects", key, got)
		}
	}
	a.expect(http.StatusNoContent, "PUT", "/v1/kv/a%2F%2Fb", "exact")
	if v, err := services.KeyValue.Get(ctx, "a//b"); err != nil || string(v) != "exact" {
		t.Fatalf("key a//b, percent-encoded, holds %q, %v", v, err)
	}
}

// A document PUT conditioned on a version, to a collection that does not
// exist, is a conflict and makes no collection: no document there is at
// that version. Before, the API made the collection, then found the
// condition failed, so a PUT with a misspelt collection's name left that
// collection behind for good.
func TestAConditionalDocumentPutToAMissingCollectionMakesNone(t *testing.T) {
	_, services := kernel(t, nil)
	a := serveAPI(t, services, httpapi.Options{})
	resp, body := a.expect(http.StatusConflict, "PUT", "/v1/documents/peopel/ada", `{"name":"Ada"}`, "If-Match", `"3"`)
	errorOf(t, resp, body)
	names, err := services.Document.Collections(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 0 {
		t.Fatalf("after a refused conditional PUT the collections are %q, want none", names)
	}
	// Unconditioned, or conditioned on absence, the first write still
	// makes the collection.
	a.expect(http.StatusOK, "PUT", "/v1/documents/people/ada", `{"name":"Ada"}`, "If-None-Match", "*")
}

// A document of more JSON values than a body holds is refused 400, naming
// the bound, before the API decodes it: a 4 MiB body of empty objects
// decoded into Go allocated some 700 MiB before the engine refused it.
func TestADocumentOfTooManyValuesIsRefusedBeforeItIsDecoded(t *testing.T) {
	_, services := kernel(t, nil)
	a := serveAPI(t, services, httpapi.Options{})
	n := (4 << 20) / 3
	body := `{"a":[{}` + strings.Repeat(`,{}`, n-1) + `]}`
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	resp, got := a.expect(http.StatusBadRequest, "PUT", "/v1/documents/people/many", body)
	runtime.ReadMemStats(&after)
	if msg := errorOf(t, resp, got); !strings.Contains(msg, "more than "+strconv.Itoa(wire.MaxValues)+" JSON values") {
		t.Errorf("PUT of %d values: %q, want it to name the bound of %d values", n+2, msg, wire.MaxValues)
	}
	// The body is read whole, and sent and received by the test's own
	// client and server: some times its size, not a hundred.
	if spent, most := after.TotalAlloc-before.TotalAlloc, uint64(16*len(body)); spent > most {
		t.Errorf("refusing a body of %d bytes allocated %d bytes, want at most %d", len(body), spent, most)
	}
	resp, got = a.expect(http.StatusNotFound, "GET", "/v1/documents/people/many", "")
	errorOf(t, resp, got)
}
