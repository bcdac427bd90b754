package httpapi_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"

	httpapi "github.com/abi-engine/engine/adapters/primary/http"
)

func TestObjects(t *testing.T) {
	_, services := kernel(t, nil)
	a := serveAPI(t, services, httpapi.Options{})
	resp, body := a.expect(http.StatusNotFound, "GET", "/v1/objects/reports/2024/q1.csv", "")
	errorOf(t, resp, body)

	resp, body = a.expect(http.StatusOK, "PUT", "/v1/objects/reports/2024/q1.csv", "a,b\n1,2\n", "Content-Type", "text/csv")
	var info httpapi.ObjectInfo
	if err := json.Unmarshal([]byte(body), &info); err != nil {
		t.Fatal(err)
	}
	if info.Key != "reports/2024/q1.csv" || info.Size != 8 || info.ETag == "" || resp.Header.Get("ETag") != `"`+info.ETag+`"` {
		t.Fatalf("PUT answered %s with ETag %s", body, resp.Header.Get("ETag"))
	}

	resp, got := a.expect(http.StatusOK, "GET", "/v1/objects/reports/2024/q1.csv", "")
	h := resp.Header
	if got != "a,b\n1,2\n" || h.Get("Content-Length") != "8" || h.Get("ETag") != `"`+info.ETag+`"` ||
		h.Get("Content-Type") != "text/csv" || h.Get("Accept-Ranges") != "bytes" || h.Get("Last-Modified") == "" {
		t.Fatalf("GET: %q with %v", got, h)
	}
	resp, got = a.expect(http.StatusOK, "HEAD", "/v1/objects/reports/2024/q1.csv", "")
	if got != "" || resp.Header.Get("Content-Length") != "8" || resp.Header.Get("ETag") != `"`+info.ETag+`"` {
		t.Fatalf("HEAD: %q with %v", got, resp.Header)
	}
	a.expect(http.StatusNotModified, "GET", "/v1/objects/reports/2024/q1.csv", "", "If-None-Match", `"`+info.ETag+`"`)
	if _, got := a.expect(http.StatusOK, "GET", "/v1/objects/reports/2024/q1.csv", "", "If-None-Match", `"other"`); got != "a,b\n1,2\n" {
		t.Fatalf("GET with a stale If-None-Match: %q", got)
	}

	resp, body = a.expect(http.StatusConflict, "PUT", "/v1/objects/reports/2024/q1.csv", "new", "If-None-Match", "*")
	errorOf(t, resp, body)
	resp, body = a.expect(http.StatusConflict, "PUT", "/v1/objects/reports/2024/q1.csv", "new", "If-Match", `"not-the-etag"`)
	errorOf(t, resp, body)
	a.expect(http.StatusOK, "PUT", "/v1/objects/reports/2024/q1.csv", "new", "If-Match", `"`+info.ETag+`"`)
	if _, got := a.expect(http.StatusOK, "GET", "/v1/objects/reports/2024/q1.csv", ""); got != "new" {
		t.Fatalf("after a conditional PUT: %q", got)
	}

	a.expect(http.StatusNoContent, "DELETE", "/v1/objects/reports/2024/q1.csv", "")
	resp, body = a.expect(http.StatusNotFound, "DELETE", "/v1/objects/reports/2024/q1.csv", "")
	errorOf(t, resp, body)
	resp, body = a.expect(http.StatusNotFound, "HEAD", "/v1/objects/reports/2024/q1.csv", "")
	if body != "" {
		t.Fatalf("HEAD of a missing object has a body: %q", body)
	}
	resp, body = a.expect(http.StatusBadRequest, "PUT", "/v1/objects/", "x")
	errorOf(t, resp, body)
}

func TestObjectRanges(t *testing.T) {
	a := serveAPI(t, memoryServices(t), httpapi.Options{})
	content := "0123456789abcdefghij" // 20 bytes
	a.expect(http.StatusOK, "PUT", "/v1/objects/r", content)
	a.expect(http.StatusOK, "PUT", "/v1/objects/empty", "")
	for _, c := range []struct {
		header, want, contentRange string
	}{
		{"bytes=0-4", "01234", "bytes 0-4/20"},
		{"bytes=10-", "abcdefghij", "bytes 10-19/20"},
		{"bytes=-3", "hij", "bytes 17-19/20"},
		{"bytes=-50", content, "bytes 0-19/20"},
		{"bytes=15-99", "fghij", "bytes 15-19/20"},
		{"bytes=19-19", "j", "bytes 19-19/20"},
	} {
		resp, got := a.expect(http.StatusPartialContent, "GET", "/v1/objects/r", "", "Range", c.header)
		if got != c.want || resp.Header.Get("Content-Range") != c.contentRange || resp.Header.Get("Content-Length") != strconv.Itoa(len(c.want)) {
			t.Fatalf("Range %s: %q, Content-Range %q, Content-Length %q; want %q, %q", c.header, got, resp.Header.Get("Content-Range"), resp.Header.Get("Content-Length"), c.want, c.contentRange)
		}
	}
	// Malformed or multiple ranges may be ignored; the whole object comes.
	for _, h := range []string{"bytes=0-1,5-6", "items=0-1", "bytes=5-2", "bytes=x-"} {
		if _, got := a.expect(http.StatusOK, "GET", "/v1/objects/r", "", "Range", h); got != content {
			t.Fatalf("Range %s: %q", h, got)
		}
	}
	for _, c := range []struct{ path, header, size string }{{"/v1/objects/r", "bytes=20-", "20"}, {"/v1/objects/r", "bytes=-0", "20"}, {"/v1/objects/empty", "bytes=0-", "0"}} {
		resp, body := a.expect(http.StatusRequestedRangeNotSatisfiable, "GET", c.path, "", "Range", c.header)
		errorOf(t, resp, body)
		if resp.Header.Get("Content-Range") != "bytes */"+c.size {
			t.Fatalf("Range %s: Content-Range %q", c.header, resp.Header.Get("Content-Range"))
		}
	}
	resp, body := a.expect(http.StatusNotFound, "GET", "/v1/objects/absent", "", "Range", "bytes=0-1")
	errorOf(t, resp, body)
}

// noise is a reproducible stream of n pseudo-random bytes, made as it is
// read, so the test never holds the object either.
func noise(seed uint64, n int64) io.Reader {
	return io.LimitReader(rand.NewChaCha8([32]byte{byte(seed)}), n)
}

// A large object goes up and comes down streamed through the engine's
// transfers, whole and by range.
func TestALargeObjectIsStreamed(t *testing.T) {
	_, services := kernel(t, nil)
	a := serveAPI(t, services, httpapi.Options{})
	const size = 24 << 20
	want := sha256.New()
	if _, err := io.Copy(want, noise(1, size)); err != nil {
		t.Fatal(err)
	}
	resp, body := a.do("PUT", "/v1/objects/big.bin", noise(1, size), "Content-Type", "application/x-test")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT %d bytes: %d %s", size, resp.StatusCode, body)
	}

	req, err := http.NewRequestWithContext(t.Context(), "GET", a.url+"/v1/objects/big.bin", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ContentLength != size {
		t.Fatalf("GET: %d, Content-Length %d", resp.StatusCode, resp.ContentLength)
	}
	got := sha256.New()
	if n, err := io.Copy(got, resp.Body); err != nil || n != size {
		t.Fatalf("GET body: %d bytes, %v", n, err)
	}
	if hex.EncodeToString(got.Sum(nil)) != hex.EncodeToString(want.Sum(nil)) {
		t.Fatalf("the object came back different")
	}

	tail := make([]byte, 10)
	src := noise(1, size)
	if _, err := io.CopyN(io.Discard, src, size-10); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(src, tail); err != nil {
		t.Fatal(err)
	}
	resp2, last := a.expect(http.StatusPartialContent, "GET", "/v1/objects/big.bin", "", "Range", "bytes=-10")
	if last != string(tail) || resp2.Header.Get("Content-Range") != "bytes "+strconv.Itoa(size-10)+"-"+strconv.Itoa(size-1)+"/"+strconv.Itoa(size) {
		t.Fatalf("the last 10 bytes: %x, Content-Range %s", last, resp2.Header.Get("Content-Range"))
	}
	if got := metric(t, a.metrics, "abi_engine_transfer_bytes_total", map[string]string{"via": "http", "direction": "in"}); got != size {
		t.Errorf("bytes in: %v, want %d", got, size)
	}
	if got := metric(t, a.metrics, "abi_engine_transfer_bytes_total", map[string]string{"via": "http", "direction": "out"}); got != size+10 {
		t.Errorf("bytes out: %v, want %d", got, size+10)
	}
	if got := metric(t, a.metrics, "abi_engine_sessions_open", map[string]string{"via": "http"}); got != 0 {
		t.Errorf("%v transfers still open", got)
	}
}

// An object PUT's If-Match must name one ETag. One that names none (an
// empty tag, *, a weak tag, a list) is a 400 that writes nothing: read as
// it came, an empty tag was no condition at all and the PUT overwrote
// whatever was stored, and the others could never match.
func TestAnObjectPutWhoseIfMatchNamesNoETagIsRefusedAndWritesNothing(t *testing.T) {
	_, services := kernel(t, nil)
	a := serveAPI(t, services, httpapi.Options{})
	_, body := a.expect(http.StatusOK, "PUT", "/v1/objects/o", "first")
	var info httpapi.ObjectInfo
	if err := json.Unmarshal([]byte(body), &info); err != nil {
		t.Fatal(err)
	}
	for _, match := range []string{`""`, `"`, `*`, `W/"` + info.ETag + `"`, `"` + info.ETag + `", "other"`} {
		resp, body := a.expect(http.StatusBadRequest, "PUT", "/v1/objects/o", "second", "If-Match", match)
		if msg := errorOf(t, resp, body); !strings.Contains(msg, "If-Match") {
			t.Errorf("PUT with If-Match %s: %q, want it to name If-Match", match, msg)
		}
		if _, got := a.expect(http.StatusOK, "GET", "/v1/objects/o", ""); got != "first" {
			t.Fatalf("a PUT with If-Match %s stored %q", match, got)
		}
	}
	a.expect(http.StatusOK, "PUT", "/v1/objects/o", "second", "If-Match", `"`+info.ETag+`"`)
}

// An object GET evaluates If-Match and If-Range against the object as it
// is, so a client never pieces one file together from two versions. A
// resumed download (Range with If-Range: the ETag it began with) gets the
// whole new object, 200, once the object has changed, not the rest of the
// new version to append to the start of the old; a download in ranges
// pinned with If-Match gets a 409 once the object has changed, not a range
// of the new version. Both headers were ignored, and a client that did
// everything HTTP asks of it saved a file that never existed.
func TestAnObjectGetHonoursIfMatchAndIfRange(t *testing.T) {
	_, services := kernel(t, nil)
	a := serveAPI(t, services, httpapi.Options{})
	resp, _ := a.expect(http.StatusOK, "PUT", "/v1/objects/o", "old version")
	old := resp.Header.Get("ETag")
	resp, _ = a.expect(http.StatusOK, "PUT", "/v1/objects/o", "new version")
	current := resp.Header.Get("ETag")
	if old == current || old == "" {
		t.Fatalf("ETags %q then %q, want two", old, current)
	}

	// Resumed with the old ETag: the whole object as it is now.
	resp, body := a.expect(http.StatusOK, "GET", "/v1/objects/o", "", "Range", "bytes=4-", "If-Range", old)
	if body != "new version" || resp.Header.Get("Content-Range") != "" {
		t.Errorf("a resume from %s answered %q (Content-Range %q), want the whole object", old, body, resp.Header.Get("Content-Range"))
	}
	// Resumed with the current ETag: the range.
	if _, body := a.expect(http.StatusPartialContent, "GET", "/v1/objects/o", "", "Range", "bytes=4-", "If-Range", current); body != "version" {
		t.Errorf("a resume from %s answered %q, want %q", current, body, "version")
	}

	// Pinned to the old version: refused, for a range, the whole object
	// and a HEAD alike.
	for _, h := range [][]string{
		{"If-Match", old},
		{"If-Match", old, "Range", "bytes=0-2"},
	} {
		resp, body := a.expect(http.StatusConflict, "GET", "/v1/objects/o", "", h...)
		if msg := errorOf(t, resp, body); !strings.Contains(msg, "If-Match") {
			t.Errorf("GET with %q: %q, want it to name If-Match", h, msg)
		}
	}
	a.expect(http.StatusConflict, "HEAD", "/v1/objects/o", "", "If-Match", old)
	// Pinned to the current version, or to any: served.
	if _, body := a.expect(http.StatusPartialContent, "GET", "/v1/objects/o", "", "If-Match", current, "Range", "bytes=0-2"); body != "new" {
		t.Errorf("a range pinned to %s answered %q", current, body)
	}
	for _, match := range []string{current, "*", old + ", " + current} {
		if _, body := a.expect(http.StatusOK, "GET", "/v1/objects/o", "", "If-Match", match); body != "new version" {
			t.Errorf("a GET with If-Match %s answered %q", match, body)
		}
	}
}
