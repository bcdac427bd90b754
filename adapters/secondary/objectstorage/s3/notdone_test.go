package s3_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

// slowDown answers as a busy S3 service does, 503 Slow Down with its
// request id, without sending the request on: the server never sees it.
func slowDown(w http.ResponseWriter, r *http.Request, _ http.Handler) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("X-Amz-Request-Id", "throttled")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?>`+
		`<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message><RequestId>throttled</RequestId></Error>`)
}

// failPart answers a part as a failing S3 service does, 500 with its
// request id, without sending it on: the part is not stored.
func failPart(w http.ResponseWriter, r *http.Request, _ http.Handler) {
	_, _ = io.Copy(io.Discard, r.Body)
	internalError(w)
}

// A write the store knows the service did not do, and that changed
// nothing, fails as ports.ErrNotDone, which tells the caller it may send
// the write again: every sending of a Put or a Delete refused (503 Slow
// Down) or its body damaged on the way each time; a multipart upload's
// part that failed each time (nothing is published before the
// completion); a completion the service failed three times, each leaving
// the upload whole; an upload someone else aborted. Before, each was an
// error of no port's kind, which the wire answers 500, "may or may not
// have happened", and the caller could not tell it was safe to send again.
func TestAWriteTheServiceDidNotDoFailsAsNotDone(t *testing.T) {
	c := server(t)
	c.Bucket = newBucket(t, c)
	direct := open(t, c)
	isPut := func(key string) func(r *http.Request) bool {
		return func(r *http.Request) bool {
			return r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/"+key) && !r.URL.Query().Has("partNumber")
		}
	}
	isPart := func(key string) func(r *http.Request) bool {
		return func(r *http.Request) bool {
			return r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/"+key) && r.URL.Query().Get("partNumber") == "2"
		}
	}
	isCompletionOf := func(key string) func(r *http.Request) bool {
		return func(r *http.Request) bool { return isCompletion(r) && strings.HasSuffix(r.URL.Path, "/"+key) }
	}
	isDelete := func(key string) func(r *http.Request) bool {
		return func(r *http.Request) bool {
			return r.Method == http.MethodDelete && strings.HasSuffix(r.URL.Path, "/"+key)
		}
	}
	small, large := 10, 17<<20
	cases := []struct {
		name   string
		size   int // 0: a Delete of an object stored before
		opts   ports.PutObjectOptions
		match  func(key string) func(r *http.Request) bool
		refuse func(w http.ResponseWriter, r *http.Request, forward http.Handler)
	}{
		{"put refused each time", small, ports.PutObjectOptions{}, isPut, slowDown},
		{"put if absent refused each time", small, ports.PutObjectOptions{IfAbsent: true}, isPut, slowDown},
		{"put damaged each time", small, ports.PutObjectOptions{}, isPut, damageBody},
		{"part damaged each time", large, ports.PutObjectOptions{}, isPart, damageBody},
		{"part failed each time", large, ports.PutObjectOptions{}, isPart, failPart},
		{"completion refused each time", large, ports.PutObjectOptions{IfAbsent: true}, isCompletionOf, slowDown},
		{"completion failed each time", large, ports.PutObjectOptions{}, isCompletionOf, func(w http.ResponseWriter, r *http.Request, _ http.Handler) {
			_, _ = io.Copy(io.Discard, r.Body)
			internalError(w)
		}},
		{"delete refused each time", 0, ports.PutObjectOptions{}, isDelete, slowDown},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := "k" + string(rune('a'+i))
			var prior []byte
			if tc.size == 0 {
				prior = []byte("before")
				if _, err := direct.Put(t.Context(), key, bytes.NewReader(prior), ports.PutObjectOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			match := tc.match(key)
			var refused atomic.Int64
			s := openThroughProxy(t, c, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
				if match(r) {
					refused.Add(1)
					tc.refuse(w, r, forward)
					return
				}
				forward.ServeHTTP(w, r)
			})
			var err error
			if tc.size == 0 {
				err = s.Delete(t.Context(), key)
			} else {
				_, err = s.Put(t.Context(), key, bytes.NewReader(bytes.Repeat([]byte("n"), tc.size)), tc.opts)
			}
			if refused.Load() < 2 {
				t.Fatalf("the proxy refused %d requests, want the write sent again (err: %v)", refused.Load(), err)
			}
			if !errors.Is(err, ports.ErrNotDone) {
				t.Fatalf("%s: %v, want ports.ErrNotDone", tc.name, err)
			}
			if prior != nil {
				if got := contracttests.ObjectContent(t, direct, key); got != string(prior) {
					t.Fatalf("the object holds %q after the Delete that was not done, want %q", got, prior)
				}
				return
			}
			if _, err := direct.Stat(t.Context(), key); !errors.Is(err, ports.ErrNotFound) {
				t.Fatalf("Stat after the Put that was not done: %v, want ports.ErrNotFound", err)
			}
		})
	}
	t.Run("upload aborted under it", func(t *testing.T) {
		const key = "aborted"
		endpoint, aborted := startInterceptor(t, c.Endpoint, isCompletionOf(key), func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
			if _, err := admin(c).AbortMultipartUpload(r.Context(), &s3.AbortMultipartUploadInput{
				Bucket: aws.String(c.Bucket), Key: aws.String(key), UploadId: aws.String(r.URL.Query().Get("uploadId")),
			}); err != nil {
				t.Errorf("abort the upload: %v", err)
			}
			forward.ServeHTTP(w, r)
		})
		_, err := openVia(t, c, endpoint).Put(t.Context(), key, bytes.NewReader(bytes.Repeat([]byte("n"), large)), ports.PutObjectOptions{})
		if aborted.Load() != 1 {
			t.Fatalf("the proxy aborted %d uploads, want 1 (Put: %v)", aborted.Load(), err)
		}
		if !errors.Is(err, ports.ErrNotDone) {
			t.Fatalf("a Put whose upload was aborted under it: %v, want ports.ErrNotDone", err)
		}
		if _, err := direct.Stat(t.Context(), key); !errors.Is(err, ports.ErrNotFound) {
			t.Fatalf("Stat after the Put whose upload was aborted: %v, want ports.ErrNotFound", err)
		}
	})
}

// A write of which one sending may have been done is never ports.ErrNotDone,
// whatever the last sending's answer: here the server stores a Put's first
// sending and its answer is lost, and the SDK's sendings after it are
// refused (503 Slow Down). The last answer alone would say nothing was
// done, of an object the server holds. The same for a completion the
// server did and answered 500.
func TestAWriteOfWhichASendingMayHaveBeenDoneIsNeverNotDone(t *testing.T) {
	c := server(t)
	c.Bucket = newBucket(t, c)
	direct := open(t, c)
	t.Run("put stored, answer lost, then refused", func(t *testing.T) {
		const key = "lost"
		content := []byte("stored by the first sending")
		var sent atomic.Int64
		s := openThroughProxy(t, c, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
			if r.Method != http.MethodPut || !strings.HasSuffix(r.URL.Path, "/"+key) {
				forward.ServeHTTP(w, r)
				return
			}
			if sent.Add(1) > 1 {
				slowDown(w, r, forward)
				return
			}
			forward.ServeHTTP(httptest.NewRecorder(), r) // the server stores it
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			conn.Close() // and its answer is lost
		})
		_, err := s.Put(t.Context(), key, bytes.NewReader(content), ports.PutObjectOptions{})
		if sent.Load() < 2 {
			t.Fatalf("the Put was sent %d times, want it sent again after its answer was lost (Put: %v)", sent.Load(), err)
		}
		if got := contracttests.ObjectContent(t, direct, key); got != string(content) {
			t.Fatalf("the object holds %q, want %q: the test did not store where it meant to (Put: %v)", got, content, err)
		}
		if err == nil || errors.Is(err, ports.ErrNotDone) {
			t.Fatalf("a Put whose first sending was stored, its answer lost: %v, want an error that is not ports.ErrNotDone", err)
		}
	})
	t.Run("completion done, answered 500", func(t *testing.T) {
		const key = "done"
		endpoint, failed := startInterceptor(t, c.Endpoint, isCompletion, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
			forward.ServeHTTP(httptest.NewRecorder(), r) // the server completes the upload
			internalError(w)
		})
		_, err := openVia(t, c, endpoint).Put(t.Context(), key, bytes.NewReader(bytes.Repeat([]byte("d"), 9<<20)), ports.PutObjectOptions{})
		if failed.Load() != 1 {
			t.Fatalf("the proxy failed %d completions, want 1 (Put: %v)", failed.Load(), err)
		}
		if err == nil || errors.Is(err, ports.ErrNotDone) {
			t.Fatalf("a Put whose completion was done and answered 500: %v, want an error that is not ports.ErrNotDone", err)
		}
	})
}
