package s3_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	objects3 "github.com/abi-engine/engine/adapters/secondary/objectstorage/s3"
	"github.com/abi-engine/engine/ports"
)

// heldAborts stands between a store and the S3 server, cancels the Put
// under test as its second part arrives, holding that part until the
// store gives it up, and holds the upload's abort until let is closed (or
// the store gives it up).
type heldAborts struct {
	cancel   context.CancelFunc
	aborting chan struct{} // closed when the abort arrives
	let      chan struct{} // closed to send the abort on
	answered chan int      // the abort's answer from the server, or 0 if given up
	once     sync.Once
}

func startHeldAborts(t *testing.T, endpoint string, cancel context.CancelFunc) (string, *heldAborts) {
	h := &heldAborts{cancel: cancel, aborting: make(chan struct{}), let: make(chan struct{}), answered: make(chan int, 1)}
	return startProxy(t, endpoint, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		switch {
		case r.Method == http.MethodPut && r.URL.Query().Get("partNumber") == "2":
			h.cancel()
			// Read, the body lets the server see the store hang up.
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case <-r.Context().Done():
			case <-time.After(time.Minute):
			}
		case r.Method == http.MethodDelete && r.URL.Query().Has("uploadId"):
			h.once.Do(func() { close(h.aborting) })
			select {
			case <-h.let:
			case <-r.Context().Done():
				h.answered <- 0
				return
			}
			rec := &statusRecorder{ResponseWriter: w}
			forward.ServeHTTP(rec, r)
			h.answered <- rec.status
		default:
			forward.ServeHTTP(w, r)
		}
	}), h
}

// statusRecorder keeps the status an answer was written with.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// uploadsOf lists the multipart uploads of key in progress.
func uploadsOf(t *testing.T, c objects3.Config, key string) int {
	t.Helper()
	out, err := admin(c).ListMultipartUploads(t.Context(), &s3.ListMultipartUploadsInput{Bucket: aws.String(c.Bucket), Prefix: aws.String(key)})
	if err != nil {
		t.Fatal(err)
	}
	return len(out.Uploads)
}

// A multipart Put whose caller gives up returns at once, and the abort of
// its upload still runs, after it has returned. Before, the Put waited in
// line for that abort, whose own limit is 30 s, after its context had
// ended: on a service slow to answer it, the caller's transfer slot stayed
// held, and its call unanswered, for up to 30 s. Here the proxy holds the
// abort until the Put has returned.
func TestACancelledPutReturnsAtOnceAndItsUploadIsStillAborted(t *testing.T) {
	c := server(t)
	c.Bucket = newBucket(t, c)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	endpoint, held := startHeldAborts(t, c.Endpoint, cancel)
	via := c
	via.Endpoint = endpoint
	s := open(t, via)
	const key = "cancelled"
	returned := make(chan error, 1)
	go func() {
		_, err := s.Put(ctx, key, bytes.NewReader(bytes.Repeat([]byte("c"), 17<<20)), ports.PutObjectOptions{})
		returned <- err
	}()
	select {
	case err := <-returned:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("a Put whose caller gave up: %v, want context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		close(held.let)
		t.Fatalf("a Put whose caller gave up had not returned 20 s after, its upload's abort held")
	}
	select {
	case <-held.aborting:
	case <-time.After(time.Minute):
		t.Fatalf("the upload of the cancelled Put was never aborted")
	}
	if n := uploadsOf(t, c, key); n != 1 {
		t.Fatalf("%d uploads in progress while the abort is held, want 1: the test did not hold it", n)
	}
	close(held.let)
	select {
	case status := <-held.answered:
		if status != http.StatusNoContent {
			t.Fatalf("the abort sent after the Put returned answered %d, want 204", status)
		}
	case <-time.After(time.Minute):
		t.Fatalf("the abort let go after the Put returned was not answered")
	}
	if n := uploadsOf(t, c, key); n != 0 {
		t.Fatalf("%d uploads left behind by the cancelled Put, want none", n)
	}
}

// Close waits for the aborts of failed uploads still running, so none
// outlives the store; one the service does not answer, Close ends after a
// few seconds (it would otherwise wait the abort's 30 s), rather than
// leave it running.
func TestCloseWaitsForTheAbortsStillRunningAndEndsThoseThatHang(t *testing.T) {
	c := server(t)
	c.Bucket = newBucket(t, c)
	for _, answers := range []bool{true, false} {
		name := "answered"
		if !answers {
			name = "hanging"
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			endpoint, held := startHeldAborts(t, c.Endpoint, cancel)
			via := c
			via.Endpoint = endpoint
			s, err := objects3.Open(t.Context(), via)
			if err != nil {
				t.Fatal(err)
			}
			key := "close" + name
			if _, err := s.Put(ctx, key, bytes.NewReader(bytes.Repeat([]byte("c"), 17<<20)), ports.PutObjectOptions{}); !errors.Is(err, context.Canceled) {
				t.Fatalf("a Put whose caller gave up: %v, want context.Canceled", err)
			}
			select {
			case <-held.aborting:
			case <-time.After(time.Minute):
				t.Fatalf("the upload of the cancelled Put was never aborted")
			}
			closed := make(chan struct{})
			go func() {
				s.Close()
				close(closed)
			}()
			if answers {
				close(held.let)
			}
			select {
			case <-closed:
			case <-time.After(25 * time.Second):
				t.Fatalf("Close had not returned 25 s after, an abort running")
			}
			if answers {
				// The abort was answered before Close returned: the
				// upload is gone.
				if n := uploadsOf(t, c, key); n != 0 {
					t.Fatalf("%d uploads in progress after Close, want none: Close returned before the abort ran", n)
				}
				return
			}
			select {
			case status := <-held.answered:
				if status != 0 {
					t.Fatalf("the hanging abort was sent on (%d), want it ended by Close", status)
				}
			case <-time.After(time.Minute):
				t.Fatalf("the hanging abort was not ended by Close")
			}
			if _, err := admin(c).AbortMultipartUpload(t.Context(), &s3.AbortMultipartUploadInput{
				Bucket: aws.String(c.Bucket), Key: aws.String(key), UploadId: aws.String(uploadID(t, c, key)),
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// uploadID names the one upload of key in progress.
func uploadID(t *testing.T, c objects3.Config, key string) string {
	t.Helper()
	out, err := admin(c).ListMultipartUploads(t.Context(), &s3.ListMultipartUploadsInput{Bucket: aws.String(c.Bucket), Prefix: aws.String(key)})
	if err != nil || len(out.Uploads) != 1 {
		t.Fatalf("the uploads of %q: %v, %d of them, want one", key, err, len(out.Uploads))
	}
	return aws.ToString(out.Uploads[0].UploadId)
}

// A Put that fails once its store is closed cleans its upload up only
// while its caller waits: nothing waits for a cleanup after Close. Before,
// such a Put ran the abort in line under the abort's own 30 s limit,
// whatever its caller, holding the call that long on a service slow to
// answer, and sending a request after Close had returned.
func TestAPutThatFailsAfterCloseDoesNotWaitOutItsAbort(t *testing.T) {
	c := server(t)
	c.Bucket = newBucket(t, c)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	partSent := make(chan struct{})
	var once sync.Once
	endpoint, held := startHeldAborts(t, c.Endpoint, func() { once.Do(func() { close(partSent) }) })
	defer close(held.let)
	via := c
	via.Endpoint = endpoint
	s, err := objects3.Open(t.Context(), via)
	if err != nil {
		t.Fatal(err)
	}
	returned := make(chan error, 1)
	go func() {
		_, err := s.Put(ctx, "after-close", bytes.NewReader(bytes.Repeat([]byte("c"), 17<<20)), ports.PutObjectOptions{})
		returned <- err
	}()
	select {
	case <-partSent:
	case <-time.After(time.Minute):
		t.Fatal("the Put's second part never reached the service")
	}
	s.Close()
	cancel()
	select {
	case err := <-returned:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("a Put whose caller gave up after Close: %v, want context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a Put whose caller gave up after Close had not returned 20 s after, waiting out its upload's abort")
	}
}
