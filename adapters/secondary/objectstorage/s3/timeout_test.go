package s3_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

// requestTimeout answers as S3 answers a request whose body did not come
// in time: 400 RequestTimeout, with the service's request id. The request
// was not done.
func requestTimeout(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("X-Amz-Request-Id", "timedout")
	w.WriteHeader(http.StatusBadRequest)
	_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?>`+
		`<Error><Code>RequestTimeout</Code><Message>Your socket connection to the server was not read from or written to within the timeout period.</Message><RequestId>timedout</RequestId></Error>`)
}

// A conditional put that S3 refuses because the request's body did not
// reach it in time (400 RequestTimeout) was not done, and is sent again and
// stores, as an unconditional put is. A put refused so every time fails as
// the service's error, not as the caller's bad input: nothing was wrong
// with what the caller sent. Before, a conditional put so refused once
// failed at once, and any put that ran out of tries was answered as an
// invalid argument (400).
func TestAPutWhoseBodyTheServiceTimedOutOnIsSentAgainAndNeverInvalid(t *testing.T) {
	c := server(t)
	c.Bucket = newBucket(t, c)
	direct := open(t, c)
	content := bytes.Repeat([]byte("t"), 10)
	t.Run("once", func(t *testing.T) {
		endpoint, refused := startInterceptor(t, c.Endpoint, func(r *http.Request) bool {
			return r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/once")
		}, func(w http.ResponseWriter, r *http.Request, _ http.Handler) { requestTimeout(w, r) })
		via := c
		via.Endpoint = endpoint
		s := open(t, via)
		if _, err := s.Put(t.Context(), "once", bytes.NewReader(content), ports.PutObjectOptions{IfAbsent: true}); err != nil {
			t.Fatalf("a put if absent refused once as timed out (400 RequestTimeout), which the service never did, failed: %v", err)
		}
		if refused.Load() != 1 {
			t.Fatalf("the proxy refused %d requests, want 1", refused.Load())
		}
		if got := contracttests.ObjectContent(t, direct, "once"); got != string(content) {
			t.Fatalf("the object holds %q, want %q", got, content)
		}
	})
	t.Run("always", func(t *testing.T) {
		target, err := url.Parse(c.Endpoint)
		if err != nil {
			t.Fatal(err)
		}
		forward := httputil.NewSingleHostReverseProxy(target)
		var refused atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPut {
				refused.Add(1)
				requestTimeout(w, r)
				return
			}
			forward.ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)
		via := c
		via.Endpoint = srv.URL
		s := open(t, via)
		for _, opts := range []ports.PutObjectOptions{{}, {IfAbsent: true}} {
			_, err := s.Put(t.Context(), "always", bytes.NewReader(content), opts)
			if err == nil || errors.Is(err, ports.ErrInvalidArgument) {
				t.Fatalf("a put %+v the service timed out on each time: %v, want an error that is not ports.ErrInvalidArgument", opts, err)
			}
		}
		if refused.Load() < 2 {
			t.Fatalf("the proxy refused %d puts, want one at least for each", refused.Load())
		}
	})
}
