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

	objects3 "github.com/abi-engine/engine/adapters/secondary/objectstorage/s3"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

// startInterceptor stands between a store and the S3 server and forwards
// every request, but hands the first one match matches to intercept, with
// the handler that forwards. It returns the endpoint to give the store
// instead, and how many requests it intercepted.
func startInterceptor(t *testing.T, endpoint string, match func(*http.Request) bool,
	intercept func(w http.ResponseWriter, r *http.Request, forward http.Handler)) (string, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	return startProxy(t, endpoint, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		if match(r) && n.CompareAndSwap(0, 1) {
			intercept(w, r, forward)
			return
		}
		forward.ServeHTTP(w, r)
	}), &n
}

// startProxy stands between a store and the S3 server at endpoint, and
// hands every request to handle with the handler that forwards it. It
// returns the endpoint to give the store instead.
func startProxy(t *testing.T, endpoint string, handle func(w http.ResponseWriter, r *http.Request, forward http.Handler)) string {
	t.Helper()
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	forward := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handle(w, r, forward) }))
	t.Cleanup(srv.Close)
	return srv.URL
}

// openVia opens a store on c's bucket that sends its requests to
// endpoint, a proxy standing before c's server.
func openVia(t *testing.T, c objects3.Config, endpoint string) *objects3.Store {
	t.Helper()
	c.Endpoint = endpoint
	return open(t, c)
}

// openThroughProxy opens a store on c's bucket whose every request goes
// through a proxy that hands it to handle, as startProxy does.
func openThroughProxy(t *testing.T, c objects3.Config, handle func(w http.ResponseWriter, r *http.Request, forward http.Handler)) *objects3.Store {
	t.Helper()
	return openVia(t, c, startProxy(t, c.Endpoint, handle))
}

// startThrottler answers the first request refuse matches as a busy S3
// service does, 503 Slow Down, without sending it on: the server never
// sees it.
func startThrottler(t *testing.T, endpoint string, refuse func(r *http.Request) bool) (string, *atomic.Int64) {
	return startInterceptor(t, endpoint, refuse, func(w http.ResponseWriter, r *http.Request, _ http.Handler) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?>`+
			`<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message><RequestId>throttled</RequestId></Error>`)
	})
}

// A conditional put the service refuses as too busy (503 Slow Down) was not
// done, and is sent again after a pause, as any other write is: a busy
// service is no reason to fail it. Only a conditional write whose answer may
// have been lost must not be sent again (TestAPutWhoseAnswerIsLostIsNotSentAgain);
// a refusal the service sent back is no such answer. Here a proxy between
// the store and the server refuses the first sending of the publishing
// request, as S3 does under load.
func TestAConditionalPutRefusedAsTooBusyIsSentAgainAndStores(t *testing.T) {
	c := server(t)
	c.Bucket = newBucket(t, c)
	direct := open(t, c)
	cases := []struct {
		name string
		key  string
		opts func(t *testing.T) ports.PutObjectOptions
	}{
		{
			name: "put if absent",
			key:  "absent",
			opts: func(*testing.T) ports.PutObjectOptions { return ports.PutObjectOptions{IfAbsent: true} },
		},
		{
			name: "put if match",
			key:  "match",
			opts: func(t *testing.T) ports.PutObjectOptions {
				info, err := direct.Put(t.Context(), "match", strings.NewReader("before"), ports.PutObjectOptions{})
				if err != nil {
					t.Fatal(err)
				}
				return ports.PutObjectOptions{IfMatch: info.ETag}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts(t)
			endpoint, refused := startThrottler(t, c.Endpoint, func(r *http.Request) bool {
				return r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/"+tc.key)
			})
			via := c
			via.Endpoint = endpoint
			s := open(t, via)
			content := bytes.Repeat([]byte("w"), 10)
			if _, err := s.Put(t.Context(), tc.key, bytes.NewReader(content), opts); err != nil {
				t.Fatalf("a conditional put refused once as too busy (503 Slow Down), which the service never did, failed: %v", err)
			}
			if refused.Load() != 1 {
				t.Fatalf("the proxy refused %d requests, want 1: the test did not throttle where it meant to", refused.Load())
			}
			if got := contracttests.ObjectContent(t, direct, tc.key); got != string(content) {
				t.Fatalf("the object holds %q, want %q", got, content)
			}
		})
	}
}

// startResetter forwards the first request reset matches, the server
// doing it, and answers the store 503 with a body of its own, as a proxy
// on the way (Envoy, for one) answers when the server's connection is
// reset before the answer's headers came back.
func startResetter(t *testing.T, endpoint string, reset func(r *http.Request) bool) (string, *atomic.Int64) {
	return startInterceptor(t, endpoint, reset, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		forward.ServeHTTP(httptest.NewRecorder(), r) // the server does the request; its answer is lost
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "upstream connect error or disconnect/reset before headers. reset reason: connection termination")
	})
}

// A 503 that is not the service's own refusal (no S3 error code, no
// request id of the service) may come from a proxy after the service did
// the request, its answer lost on the way back: a conditional put so
// answered is not sent again, since its second sending would fail the
// condition the first one met. It fails with an outcome unknown, never
// with a conflict for a write that happened. Before, every 503 was taken
// for the service's Slow Down and the put sent again: a put if absent that
// had stored its object answered that the object existed.
func TestAConditionalPutAnsweredWithAProxys503IsNotSentAgain(t *testing.T) {
	c := server(t)
	c.Bucket = newBucket(t, c)
	direct := open(t, c)
	const key = "proxied"
	endpoint, replaced := startResetter(t, c.Endpoint, func(r *http.Request) bool {
		return r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/"+key)
	})
	via := c
	via.Endpoint = endpoint
	s := open(t, via)
	content := bytes.Repeat([]byte("p"), 10)
	_, err := s.Put(t.Context(), key, bytes.NewReader(content), ports.PutObjectOptions{IfAbsent: true})
	if replaced.Load() != 1 {
		t.Fatalf("the proxy replaced %d answers, want 1: the test did not reset where it meant to", replaced.Load())
	}
	if errors.Is(err, ports.ErrConflict) {
		t.Fatalf("a put if absent that stored its object, its answer lost behind a proxy's 503, answered a conflict: %v", err)
	}
	if got := contracttests.ObjectContent(t, direct, key); got != string(content) {
		t.Fatalf("the object holds %q, want %q (the put returned %v)", got, content, err)
	}
}
