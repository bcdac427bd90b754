package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	httpapi "github.com/abi-engine/engine/adapters/primary/http"
	kvpostgres "github.com/abi-engine/engine/adapters/secondary/keyvalue/postgres"
	kvsqlite "github.com/abi-engine/engine/adapters/secondary/keyvalue/sqlite"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/pgtest"
	"github.com/abi-engine/engine/internal/testenv"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// errorOf decodes an error body and checks it carries the status.
func errorOf(t *testing.T, resp *http.Response, body string) string {
	t.Helper()
	var e struct {
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("error body %q is not JSON: %v", body, err)
	}
	if e.Error.Code != resp.StatusCode || e.Error.Message == "" || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d with error body %q (%s)", resp.StatusCode, body, resp.Header.Get("Content-Type"))
	}
	return e.Error.Message
}

func TestProbes(t *testing.T) {
	a := serveAPI(t, httpapi.Services{}, httpapi.Options{})
	a.expect(http.StatusOK, "GET", "/healthz", "")
	a.expect(http.StatusOK, "GET", "/readyz", "")
	a.engine.ready.Store(false)
	_, body := a.expect(http.StatusServiceUnavailable, "GET", "/readyz", "")
	if !strings.Contains(body, `"ready":false`) {
		t.Fatalf("/readyz of an engine that is not ready: %s", body)
	}
	a.expect(http.StatusOK, "GET", "/healthz", "")
}

func TestStatusIsTheEnginesOwnJSON(t *testing.T) {
	a := serveAPI(t, httpapi.Services{}, httpapi.Options{})
	resp, body := a.expect(http.StatusOK, "GET", "/status", "")
	var st map[string]any
	if err := json.Unmarshal([]byte(body), &st); err != nil || st["state"] != "serving" || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("/status: %s (%v)", body, err)
	}
}

func TestTheTokenGuardsAllButTheProbes(t *testing.T) {
	_, services := kernel(t, nil)
	a := serveAPI(t, services, httpapi.Options{Token: "s3cret"})
	anonymous := *a
	anonymous.token = ""
	wrong := *a
	wrong.token = "s3creT"
	longer := *a
	longer.token = "s3cret-and-more"
	for _, path := range []string{"/healthz", "/readyz"} {
		anonymous.expect(http.StatusOK, "GET", path, "")
	}
	for _, c := range []*api{&anonymous, &wrong, &longer} {
		for _, r := range [][2]string{{"GET", "/status"}, {"GET", "/metrics"}, {"GET", "/v1/kv/k"}, {"PUT", "/v1/kv/k"}, {"GET", "/nowhere"}} {
			resp, body := c.expect(http.StatusUnauthorized, r[0], r[1], "")
			errorOf(t, resp, body)
			if resp.Header.Get("WWW-Authenticate") == "" {
				t.Fatalf("%s %s: 401 without WWW-Authenticate", r[0], r[1])
			}
		}
	}
	a.expect(http.StatusNoContent, "PUT", "/v1/kv/k", "v")
	a.expect(http.StatusOK, "GET", "/status", "")
	a.expect(http.StatusOK, "GET", "/metrics", "")
	if _, got := a.expect(http.StatusOK, "GET", "/v1/kv/k", ""); got != "v" {
		t.Fatalf("GET with the token: %q", got)
	}
}

func TestUnknownRoutesAndMethodsAnswerJSON(t *testing.T) {
	a := serveAPI(t, memoryServices(t), httpapi.Options{})
	resp, body := a.expect(http.StatusNotFound, "GET", "/v2/kv/k", "")
	errorOf(t, resp, body)
	resp, body = a.expect(http.StatusMethodNotAllowed, "POST", "/v1/kv/k", "")
	errorOf(t, resp, body)
	if allow := resp.Header.Get("Allow"); allow != "DELETE, GET, HEAD, PUT" {
		t.Fatalf("Allow: %q", allow)
	}
	resp, body = a.expect(http.StatusMethodNotAllowed, "PATCH", "/v1/documents/c/find", "")
	errorOf(t, resp, body)
}

func TestASwitchedOffServiceAnswers501(t *testing.T) {
	a := serveAPI(t, memoryServices(t), httpapi.Options{})
	for _, r := range [][2]string{{"GET", "/v1/documents/c/d"}, {"POST", "/v1/documents/c/find"}, {"POST", "/v1/vectors/c/search"}} {
		resp, body := a.expect(http.StatusNotImplemented, r[0], r[1], "{}")
		if msg := errorOf(t, resp, body); !strings.Contains(msg, "switched off") {
			t.Fatalf("%s %s: %q", r[0], r[1], msg)
		}
	}
}

// With no engine serving, the facades give up after their deadline and the
// API says the service is unavailable: what a client sees between the old
// engine and the new one if the handover takes too long.
func TestNoServingEngineIs503(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	a := serveAPI(t, facades(natsclient.New(natstest.Connect(t, url), natsclient.WithTimeout(time.Second))), httpapi.Options{})
	for _, r := range [][2]string{{"GET", "/v1/kv/k"}, {"GET", "/v1/documents/c/d"}, {"GET", "/v1/objects/o"}} {
		resp, body := a.expect(http.StatusServiceUnavailable, r[0], r[1], "")
		errorOf(t, resp, body)
	}
}

// An engine that requires caller tokens refuses an unsigned facade: the
// HTTP client did nothing wrong, so it is told 502, not 401.
func TestACallerTokenRefusalIs502(t *testing.T) {
	_, services := kernel(t, []byte("caller-secret"))
	a := serveAPI(t, services, httpapi.Options{})
	resp, body := a.expect(http.StatusBadGateway, "GET", "/v1/kv/k", "")
	errorOf(t, resp, body)
}

func TestStatusOf(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{ports.ErrInvalidArgument, 400},
		{ports.ErrNotFound, 404},
		{ports.ErrConflict, 409},
		{ports.ErrTooLarge, 413},
		{&http.MaxBytesError{Limit: 1}, 413},
		{ports.ErrStorageFull, 507},
		{ports.ErrNotDone, 503},
		{fmt.Errorf("%w: %w", wire.ErrInterrupted, ports.ErrNotDone), 500},
		{&wire.RemoteError{Code: 507, Message: "storage full"}, 507},
		{context.DeadlineExceeded, 504},
		{errors.New("disk on fire"), 500},
	} {
		if got := httpapi.StatusOf(c.err); got != c.want {
			t.Errorf("StatusOf(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

func TestBindOnPortZeroServeAndShutdown(t *testing.T) {
	e := &engine{}
	e.ready.Store(true)
	ln, err := httpapi.Bind("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := httpapi.Serve(ln, httpapi.Options{Engine: e})
	if _, port, _ := net.SplitHostPort(s.Addr()); port == "0" || port == "" {
		t.Fatalf("Addr %q has no real port", s.Addr())
	}
	resp, err := http.Get("http://" + s.Addr() + "/readyz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /readyz: %v %v", resp, err)
	}
	resp.Body.Close()
	if _, err := httpapi.Bind(s.Addr()); err == nil || !strings.Contains(err.Error(), "http.listen") {
		t.Fatalf("a second Bind on a taken port: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + s.Addr() + "/healthz"); err == nil {
		t.Fatalf("the server still answers after Shutdown")
	}
}

// A 500's body says what failed and where in the log the rest is, never
// the backend's text: here a real SQLite store, closed under the API,
// fails with an error naming its file on the engine's host.
func TestA500BodyHidesTheBackendsText(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.db")
	kv, err := kvsqlite.Open(t.Context(), kvsqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(t.Context(), "k"); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("the closed store's error %v does not name its file; the test shows nothing", err)
	}
	a := serveAPI(t, httpapi.Services{KeyValue: kv}, httpapi.Options{})
	_, body := a.expect(http.StatusInternalServerError, "GET", "/v1/kv/k", "")
	if strings.Contains(body, path) || strings.Contains(body, "closed") {
		t.Fatalf("the 500 body carries the backend's text: %s", body)
	}
	if !strings.Contains(body, "log ref ") || !strings.Contains(body, "/v1/kv/k") {
		t.Fatalf("the 500 body %s names neither the call nor a log reference", body)
	}
}

// A 507's body, as a 500's, says what failed and where in the log the rest
// is, never the backend's text: here a real PostgreSQL store whose server
// refuses the write as on a full disk. Before, the body carried the
// server's own words.
func TestA507BodyHidesTheBackendsText(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	table := pgtest.Table(t, dsn, "httpfull")
	kv, err := kvpostgres.Open(t.Context(), kvpostgres.Config{DSN: dsn, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kv.Close() })
	pgtest.DiskFull(t, dsn, table)
	a := serveAPI(t, httpapi.Services{KeyValue: kv}, httpapi.Options{})
	_, body := a.expect(http.StatusInsufficientStorage, "PUT", "/v1/kv/k", "v")
	if strings.Contains(body, "No space") || strings.Contains(body, table) {
		t.Fatalf("the 507 body carries the backend's text: %s", body)
	}
	if !strings.Contains(body, "log ref ") || !strings.Contains(body, "/v1/kv/k") || !strings.Contains(body, "no room") {
		t.Fatalf("the 507 body %s names neither the call, the want of room nor a log reference", body)
	}
}

// The authentication scheme is a case-insensitive token (RFC 9110): the
// token sent as "bearer", "BEARER" or "Bearer" is the same token, and
// answers. Before, only "Bearer " passed, and a client whose library
// writes the scheme in lower case was told its valid token was not one.
func TestTheBearerSchemeIsTakenInAnyCase(t *testing.T) {
	a := serveAPI(t, memoryServices(t), httpapi.Options{Token: "s3cret"})
	anonymous := *a
	anonymous.token = ""
	for _, scheme := range []string{"Bearer", "bearer", "BEARER"} {
		anonymous.expect(http.StatusOK, "GET", "/status", "", "Authorization", scheme+" s3cret")
	}
	for _, header := range []string{"Bearer s3creT", "Basic s3cret", "Bearers3cret", "s3cret"} {
		anonymous.expect(http.StatusUnauthorized, "GET", "/status", "", "Authorization", header)
	}
}

// Many connections sending large headers hold little of the engine's
// memory: a request whose line and headers pass MaxHeaderBytes is answered
// 431 and its connection closed. Each connection could hold a megabyte of
// headers for the 10 s they may take, however many came.
func TestLargeHeadersAreRefusedNotHeld(t *testing.T) {
	const (
		conns = 16
		sent  = 512 << 10
	)
	url := serveReal(t, memoryServices(t), httpapi.Options{})
	line := "X-Pad: " + strings.Repeat("h", 4<<10-len("X-Pad: \r\n")) + "\r\n"
	pad := []byte(strings.Repeat(line, sent/len(line)))

	base := heapInUse()
	answers := make(chan string, conns)
	for range conns {
		conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		_ = conn.SetDeadline(time.Now().Add(45 * time.Second))
		go func() {
			if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"); err == nil {
				_, _ = conn.Write(pad) // the headers never end
			}
		}()
		go func() {
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				answers <- err.Error()
				return
			}
			_ = resp.Body.Close()
			answers <- resp.Status
		}()
	}
	var peak int64
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for answered := 0; answered < conns; {
		select {
		case a := <-answers:
			answered++
			if !strings.HasPrefix(a, "431") {
				t.Fatalf("a request of %d KiB of headers got %q, want 431", sent>>10, a)
			}
		case <-tick.C:
		}
		peak = max(peak, heapInUse()-base)
		if peak > 4<<20 {
			t.Fatalf("%d connections sending headers held %d MiB at once", conns, peak>>20)
		}
	}
}

// The headers the largest request needs are served, and a request whose
// line and headers pass that by 24 KiB is refused 431. The bound was
// 64 KiB: every connection the API admits, 8192 of them, could hold some
// 70 KiB of heap while its headers arrived, 560 MiB in all.
func TestHeadersPastWhatTheLargestRequestNeedsAreRefused(t *testing.T) {
	const token = "s3cret"
	url := serveReal(t, memoryServices(t), httpapi.Options{Token: token})
	key := strings.Repeat("k", 1024) // the most a key may be
	path := "/v1/kv/" + strings.Repeat("%6B", len(key))
	hops := strings.TrimSuffix(strings.Repeat("203.0.113.7, ", 16), ", ")
	put := func(pad int) int {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, "PUT", url+path, strings.NewReader("v"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", strings.Repeat("t", 1024))
		req.Header.Set("X-Forwarded-For", hops)
		if pad > 0 {
			req.Header.Set("X-Pad", strings.Repeat("p", pad))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("a PUT with %d bytes of padding: %v", pad, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if code := put(0); code != http.StatusNoContent {
		t.Fatalf("a PUT of a key of the most, percent-encoded whole, with a token, a content type of the most and 16 proxies' hops answered %d", code)
	}
	const pad = 24 << 10
	if code := put(pad); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("a PUT with %d bytes of headers more than the largest request needs answered %d, want 431", pad, code)
	}
}
