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

// internalError answers as an S3 service answers a request it failed: 500
// InternalError, with its request id.
func internalError(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("X-Amz-Request-Id", "failed")
	w.WriteHeader(http.StatusInternalServerError)
	_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?>`+
		`<Error><Code>InternalError</Code><Message>We encountered an internal error, please try again.</Message><RequestId>failed</RequestId></Error>`)
}

// isCompletion tells the request that completes a multipart upload.
func isCompletion(r *http.Request) bool {
	return r.Method == http.MethodPost && r.URL.Query().Has("uploadId")
}

// versitygw now and then answers the completion of a multipart upload 500
// InternalError when other Puts and Deletes of the key and of keys beside
// it race it, having stored nothing and left the upload whole. A 500 alone
// says nothing of whether the completion was done, so the store looks at
// the upload: left whole, the completion published nothing, and is sent
// again, conditions and all, and the Put stores its object. Gone, the
// completion may have published it, and it is not sent again (sent again,
// a conditional one would fail on the object it stored): the Put fails,
// saying the outcome is unknown, never a conflict, as it does when the
// completion, sent again, finds its upload gone. Before, every completion
// answered 500 failed the Put, as the engine's internal error of unknown
// outcome, though the store could tell that nothing was stored. Here a
// proxy stands for the race: it answers the completion 500 without
// sending it on, or after the server did it.
func TestACompletionTheServiceFailedLeavingTheUploadWholeIsSentAgain(t *testing.T) {
	c := server(t)
	c.Bucket = newBucket(t, c)
	direct := open(t, c)
	content := bytes.Repeat([]byte("c"), 9<<20)
	for _, opts := range []ports.PutObjectOptions{{}, {IfAbsent: true}} {
		name := "put"
		if opts.IfAbsent {
			name = "put if absent"
		}
		t.Run(name+"/failed once before it was done", func(t *testing.T) {
			key := "once" + strings.ReplaceAll(name, " ", "-")
			var sent atomic.Int64
			s := openThroughProxy(t, c, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
				if isCompletion(r) && sent.Add(1) == 1 {
					_, _ = io.Copy(io.Discard, r.Body)
					internalError(w)
					return
				}
				forward.ServeHTTP(w, r)
			})
			if _, err := s.Put(t.Context(), key, bytes.NewReader(content), opts); err != nil {
				t.Fatalf("a multipart %s whose completion the service failed once, leaving the upload whole, failed: %v", name, err)
			}
			if n := sent.Load(); n != 2 {
				t.Fatalf("the completion was sent %d times, want twice", n)
			}
			if got := contracttests.ObjectContent(t, direct, key); got != string(content) {
				t.Fatalf("the object holds %d bytes, want %d", len(got), len(content))
			}
		})
		t.Run(name+"/failed each time before it was done", func(t *testing.T) {
			key := "always" + strings.ReplaceAll(name, " ", "-")
			var sent atomic.Int64
			s := openThroughProxy(t, c, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
				if isCompletion(r) {
					sent.Add(1)
					_, _ = io.Copy(io.Discard, r.Body)
					internalError(w)
					return
				}
				forward.ServeHTTP(w, r)
			})
			_, err := s.Put(t.Context(), key, bytes.NewReader(content), opts)
			if err == nil || errors.Is(err, ports.ErrConflict) || errors.Is(err, ports.ErrNotFound) || errors.Is(err, ports.ErrInvalidArgument) {
				t.Fatalf("a multipart %s whose completion the service failed each time: %v, want an error that is none of conflict, not found, invalid argument", name, err)
			}
			if !strings.Contains(err.Error(), "nothing was stored") {
				t.Fatalf("a multipart %s whose completion the service failed each time, leaving the upload whole: %v, want it to say nothing was stored", name, err)
			}
			if n := sent.Load(); n < 2 {
				t.Fatalf("the completion was sent %d times, want it sent again", n)
			}
			if _, err := direct.Stat(t.Context(), key); !errors.Is(err, ports.ErrNotFound) {
				t.Fatalf("Stat after the failed Put: %v, want ports.ErrNotFound", err)
			}
			uploads, err := admin(c).ListMultipartUploads(t.Context(), &s3.ListMultipartUploadsInput{Bucket: aws.String(c.Bucket), Prefix: aws.String(key)})
			if err != nil {
				t.Fatal(err)
			}
			if len(uploads.Uploads) > 0 {
				t.Fatalf("the failed Put left %d multipart uploads behind", len(uploads.Uploads))
			}
		})
		t.Run(name+"/failed then sent again on an upload gone", func(t *testing.T) {
			key := "gone" + strings.ReplaceAll(name, " ", "-")
			var sent atomic.Int64
			s := openThroughProxy(t, c, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
				if !isCompletion(r) {
					forward.ServeHTTP(w, r)
					return
				}
				if sent.Add(1) == 1 {
					_, _ = io.Copy(io.Discard, r.Body)
					internalError(w)
					return
				}
				// The upload ends between the store's look at it and the
				// second sending, as it would if the first had been done.
				if _, err := admin(c).AbortMultipartUpload(r.Context(), &s3.AbortMultipartUploadInput{
					Bucket: aws.String(c.Bucket), Key: aws.String(key), UploadId: aws.String(r.URL.Query().Get("uploadId")),
				}); err != nil {
					t.Errorf("abort the upload: %v", err)
				}
				forward.ServeHTTP(w, r)
			})
			_, err := s.Put(t.Context(), key, bytes.NewReader(content), opts)
			if n := sent.Load(); n != 2 {
				t.Fatalf("the completion was sent %d times, want twice (Put: %v)", n, err)
			}
			if err == nil || errors.Is(err, ports.ErrConflict) || errors.Is(err, ports.ErrNotFound) || !strings.Contains(err.Error(), "may or may not") {
				t.Fatalf("a multipart %s whose completion, sent again, found its upload gone: %v, want an error saying the outcome is unknown", name, err)
			}
		})
		t.Run(name+"/failed after it was done", func(t *testing.T) {
			key := "done" + strings.ReplaceAll(name, " ", "-")
			var sent atomic.Int64
			s := openThroughProxy(t, c, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
				if isCompletion(r) && sent.Add(1) == 1 {
					forward.ServeHTTP(httptest.NewRecorder(), r) // the server completes the upload
					internalError(w)
					return
				}
				forward.ServeHTTP(w, r)
			})
			_, err := s.Put(t.Context(), key, bytes.NewReader(content), opts)
			if n := sent.Load(); n != 1 {
				t.Fatalf("a completion answered 500 after it was done was sent %d times, want once (Put: %v)", n, err)
			}
			if got := contracttests.ObjectContent(t, direct, key); got != string(content) {
				t.Fatalf("the object holds %d bytes, want %d: the test did not fail the completion where it meant to", len(got), len(content))
			}
			if err == nil || errors.Is(err, ports.ErrConflict) || errors.Is(err, ports.ErrNotFound) || !strings.Contains(err.Error(), "may or may not") {
				t.Fatalf("a multipart %s whose completion was done and answered 500: %v, want an error saying the outcome is unknown", name, err)
			}
		})
	}
}
