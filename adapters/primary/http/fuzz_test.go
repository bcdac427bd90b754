package httpapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	httpapi "github.com/abi-engine/engine/adapters/primary/http"
	docmemory "github.com/abi-engine/engine/adapters/secondary/document/memory"
	vecmemory "github.com/abi-engine/engine/adapters/secondary/vectorstore/memory"
)

var fuzzMethods = []string{"GET", "PUT", "POST", "DELETE", "HEAD"}

// FuzzHTTPRequests sends any method, path, body and condition headers to
// the REST surface over memory stores: none may panic or answer 500 (the
// stores cannot fail), and every error is the API's JSON error body.
func FuzzHTTPRequests(f *testing.F) {
	for _, s := range []struct {
		method       uint8
		path, range_ string
		body         string
	}{
		{1, "/v1/kv/a/b?ttl=30s", "", "value"},
		{1, "/v1/kv/k?ttl=1ns", "", "v"},
		{1, "/v1/kv/k?ttl=-1s", "", "v"},
		{0, "/v1/kv/a/b", "", ""},
		{1, "/v1/objects/o.txt", "", "object"},
		{0, "/v1/objects/o.txt", "bytes=1-2", ""},
		{0, "/v1/objects/o.txt", "bytes=-0", ""},
		{1, "/v1/documents/c/d", "", `{"n":1,"s":"x"}`},
		{1, "/v1/documents/c/d", "", `{"s":"a\u0000b"}`},
		{1, "/v1/documents/c/d", "", strings.Repeat(`{"a":`, 101) + `1` + strings.Repeat(`}`, 101)},
		{2, "/v1/documents/c/find", "", `{"where":{"n":1},"order_by":"n","limit":9223372036854775807}`},
		{2, "/v1/documents/c/find", "", `{"cursor":"eyJvIjoibiJ9"}`},
		{2, "/v1/vectors/v/search", "", `{"vector":[1,0],"k":1000000000}`},
		{3, "/v1/objects/o.txt", "", ""},
	} {
		f.Add(s.method, s.path, s.range_, []byte(s.body))
	}
	docs := docmemory.New()
	vectors, err := vecmemory.Open(f.Context(), vecmemory.Config{})
	if err != nil {
		f.Fatal(err)
	}
	if err := vectors.CreateCollection(f.Context(), "v", 2, "dot"); err != nil {
		f.Fatal(err)
	}
	services := memoryServices(f)
	services.Document, services.VectorStore = docs, vectors
	h := httpapi.NewHandler(httpapi.Options{Services: services, Engine: &engine{}})

	f.Fuzz(func(t *testing.T, method uint8, path, rangeHeader string, body []byte) {
		if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \r\n") {
			return // not a request line a client can send
		}
		if _, err := url.ParseRequestURI(path); err != nil {
			return // the server refuses it before any handler
		}
		req := httptest.NewRequestWithContext(t.Context(), fuzzMethods[int(method)%len(fuzzMethods)], "http://127.0.0.1"+path, bytes.NewReader(body))
		if rangeHeader != "" {
			req.Header.Set("Range", rangeHeader)
			req.Header.Set("If-Match", rangeHeader)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 && rec.Code != http.StatusNotImplemented {
			t.Fatalf("%s %s (%q): %d %s", req.Method, path, body, rec.Code, rec.Body)
		}
		if rec.Code >= 400 && req.Method != "HEAD" {
			var e struct {
				Error struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Code != rec.Code {
				t.Fatalf("%s %s: %d with a body that is not the API's error: %q", req.Method, path, rec.Code, rec.Body)
			}
		}
	})
}
