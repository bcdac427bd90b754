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

	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

// A multipart upload can be aborted by someone other than the Put that
// made it: a bucket's lifecycle rule for incomplete uploads, or an
// operator's cleanup, while the Put still sends parts or completes it. The
// Put then stored nothing, and says so: it fails naming the aborted
// upload, neither as not found (404), which a Put cannot be, nor, with
// IfMatch, as a conflict (409), which tells the caller another writer
// changed the object, when it holds what it held. Before, S3's NoSuchUpload
// was answered as the first, or the second for a put if match. Here a
// proxy aborts the upload just before the request that would have used it.
// (A completion is aborted only on a key that holds no object: versitygw
// answers the completion of an aborted upload as done when the key holds
// one, whatever it holds.)
func TestAPutWhoseUploadIsAbortedUnderItSaysSoAndStoresNothing(t *testing.T) {
	c := server(t)
	c.Bucket = newBucket(t, c)
	direct := open(t, c)
	beforePart := func(r *http.Request) bool {
		return r.Method == http.MethodPut && r.URL.Query().Get("partNumber") == "2"
	}
	beforeCompletion := func(r *http.Request) bool {
		return r.Method == http.MethodPost && r.URL.Query().Has("uploadId")
	}
	cases := []struct {
		name  string
		prior bool // the key holds an object before the Put
		opts  func(prior ports.ObjectInfo) ports.PutObjectOptions
		// uses tells the request that names the upload, before which it
		// is aborted.
		uses func(r *http.Request) bool
	}{
		{"put/before a part", true, func(ports.ObjectInfo) ports.PutObjectOptions { return ports.PutObjectOptions{} }, beforePart},
		{"put if match/before a part", true, func(prior ports.ObjectInfo) ports.PutObjectOptions {
			return ports.PutObjectOptions{IfMatch: prior.ETag}
		}, beforePart},
		{"put/before the completion", false, func(ports.ObjectInfo) ports.PutObjectOptions { return ports.PutObjectOptions{} }, beforeCompletion},
		{"put if absent/before the completion", false, func(ports.ObjectInfo) ports.PutObjectOptions { return ports.PutObjectOptions{IfAbsent: true} }, beforeCompletion},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := "k" + string(rune('a'+i))
			var prior ports.ObjectInfo
			if tc.prior {
				var err error
				if prior, err = direct.Put(t.Context(), key, strings.NewReader("before"), ports.PutObjectOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			endpoint, aborted := startInterceptor(t, c.Endpoint, tc.uses, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
				if _, err := admin(c).AbortMultipartUpload(r.Context(), &s3.AbortMultipartUploadInput{
					Bucket: aws.String(c.Bucket), Key: aws.String(key), UploadId: aws.String(r.URL.Query().Get("uploadId")),
				}); err != nil {
					t.Errorf("abort the upload: %v", err)
				}
				if r.Method == http.MethodPost {
					forward.ServeHTTP(w, r)
					return
				}
				// versitygw answers a part of an aborted upload before it
				// reads the part, and closes the connection on the rest of
				// it, which a proxy cannot forward: its answer is given as
				// it is.
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/xml")
				w.Header().Set("X-Amz-Request-Id", "aborted")
				w.WriteHeader(http.StatusNotFound)
				_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?>`+
					`<Error><Code>NoSuchUpload</Code><Message>The specified multipart upload does not exist.</Message><RequestId>aborted</RequestId></Error>`)
			})
			via := c
			via.Endpoint = endpoint
			s := open(t, via)
			_, err := s.Put(t.Context(), key, bytes.NewReader(bytes.Repeat([]byte("n"), 17<<20)), tc.opts(prior))
			if aborted.Load() != 1 {
				t.Fatalf("the proxy aborted %d uploads, want 1: the test did not abort where it meant to (Put: %v)", aborted.Load(), err)
			}
			if err == nil || errors.Is(err, ports.ErrNotFound) || errors.Is(err, ports.ErrConflict) || errors.Is(err, ports.ErrInvalidArgument) {
				t.Fatalf("a Put whose upload was aborted under it: %v, want an error that is none of not found, conflict, invalid argument", err)
			}
			if !strings.Contains(err.Error(), "aborted") {
				t.Fatalf("a Put whose upload was aborted under it: %v, want it to say the upload was aborted", err)
			}
			if !tc.prior {
				if _, err := direct.Stat(t.Context(), key); !errors.Is(err, ports.ErrNotFound) {
					t.Fatalf("Stat after the failed Put: %v, want ports.ErrNotFound", err)
				}
				return
			}
			if got := contracttests.ObjectContent(t, direct, key); got != "before" {
				t.Fatalf("the object holds %d bytes after the failed Put, want %q", len(got), "before")
			}
		})
	}
}
