package s3_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/abi-engine/engine/ports"
)

// startFiller answers the first request refuse matches as an S3 server
// with no room answers it, without sending it on: status and code are
// the server's (versitygw answers a full disk 507 InsufficientStorage and
// a quota 403 QuotaExceeded).
func startFiller(t *testing.T, endpoint string, status int, code, message string, refuse func(r *http.Request) bool) (string, interface{ Load() int64 }) {
	return startInterceptor(t, endpoint, refuse, func(w http.ResponseWriter, r *http.Request, _ http.Handler) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/xml")
		w.Header().Set("X-Amz-Request-Id", "full")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?>`+
			`<Error><Code>`+code+`</Code><Message>`+message+`</Message><RequestId>full</RequestId></Error>`)
	})
}

// A put the S3 server has no room for is ports.ErrStorageFull, which the
// engine answers 507, as the SQLite, PostgreSQL and JetStream stores
// answer a full disk: the caller learns that nothing was written and that
// the write may be taken once room is made. Before, the refusal reached the
// caller as an internal error (500), whatever the request that met it: the
// object's one request, a part of a multipart upload, or its completion.
// A full disk cannot be caused on the shared S3 server, so a proxy answers
// the refusal as versitygw does.
func TestAPutTheServerHasNoRoomForIsStorageFull(t *testing.T) {
	c := server(t)
	c.Bucket = newBucket(t, c)
	direct := open(t, c)
	small, large := bytes.Repeat([]byte("s"), 10), bytes.Repeat([]byte("l"), 9<<20)
	cases := []struct {
		name    string
		status  int
		code    string
		message string
		content []byte
		refuse  func(r *http.Request) bool
	}{
		{"one request, disk full", http.StatusInsufficientStorage, "InsufficientStorage", "No space left on device.", small,
			func(r *http.Request) bool { return r.Method == http.MethodPut }},
		{"one request, quota", http.StatusForbidden, "QuotaExceeded", "Your request was denied due to quota exceeded.", small,
			func(r *http.Request) bool { return r.Method == http.MethodPut }},
		{"a part, disk full", http.StatusInsufficientStorage, "InsufficientStorage", "No space left on device.", large,
			func(r *http.Request) bool { return r.Method == http.MethodPut && r.URL.Query().Has("partNumber") }},
		{"the completion, disk full", http.StatusInsufficientStorage, "InsufficientStorage", "No space left on device.", large,
			func(r *http.Request) bool { return r.Method == http.MethodPost && r.URL.Query().Has("uploadId") }},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := "full" + strings.Repeat("x", i)
			endpoint, refused := startFiller(t, c.Endpoint, tc.status, tc.code, tc.message, func(r *http.Request) bool {
				return strings.HasSuffix(r.URL.Path, "/"+key) && tc.refuse(r)
			})
			via := c
			via.Endpoint = endpoint
			s := open(t, via)
			_, err := s.Put(t.Context(), key, bytes.NewReader(tc.content), ports.PutObjectOptions{})
			if refused.Load() != 1 {
				t.Fatalf("the proxy refused %d requests, want 1: the test did not refuse where it meant to (put: %v)", refused.Load(), err)
			}
			if !errors.Is(err, ports.ErrStorageFull) {
				t.Fatalf("a put the server had no room for (%d %s) answered %v, want ports.ErrStorageFull", tc.status, tc.code, err)
			}
			if _, err := direct.Stat(t.Context(), key); !errors.Is(err, ports.ErrNotFound) {
				t.Fatalf("after the refused put, Stat %q: %v, want ErrNotFound", key, err)
			}
			uploads, err := admin(c).ListMultipartUploads(t.Context(), &s3.ListMultipartUploadsInput{Bucket: aws.String(c.Bucket)})
			if err != nil {
				t.Fatal(err)
			}
			if len(uploads.Uploads) > 0 {
				t.Fatalf("the refused put left %d multipart uploads behind, the first of %q", len(uploads.Uploads), aws.ToString(uploads.Uploads[0].Key))
			}
		})
	}
}
