package s3_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

// damagedAnswer answers as S3 answers a request whose body did not arrive
// whole or as sent, with the service's request id: the request was not
// done.
func damagedAnswer(code, message string) func(w http.ResponseWriter, r *http.Request, _ http.Handler) {
	return func(w http.ResponseWriter, r *http.Request, _ http.Handler) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/xml")
		w.Header().Set("X-Amz-Request-Id", "damaged")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?>`+
			`<Error><Code>`+code+`</Code><Message>`+message+`</Message><RequestId>damaged</RequestId></Error>`)
	}
}

// damageBody forwards the request with one byte of its body changed, so
// that the server itself finds the body is not what the store signed.
func damageBody(w http.ResponseWriter, r *http.Request, forward http.Handler) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if len(body) > 0 {
		body[len(body)/2] ^= 0xff
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	forward.ServeHTTP(w, r)
}

// The body of a write is the store's own: it reads the caller's stream into
// a buffer and sends that. S3 refuses a request whose body ended before its
// length (400 IncompleteBody) or whose bytes differ from the digest the
// store sent (400 BadDigest, XAmzContentSHA256Mismatch), having done
// nothing: the body was damaged on the way, and nothing the caller gave was
// wrong. Such a request is sent again, a conditional one too, and the
// write stores; one refused so each time fails as the service's error,
// never as the caller's invalid argument (400), which tells the caller to
// change a request that was right. Before, each failed at once, answered as
// an invalid argument.
func TestAWriteWhoseBodyArrivedDamagedIsSentAgainAndNeverInvalid(t *testing.T) {
	c := server(t)
	c.Bucket = newBucket(t, c)
	direct := open(t, c)
	damages := []struct {
		name   string
		damage func(w http.ResponseWriter, r *http.Request, forward http.Handler)
	}{
		{"incomplete body", damagedAnswer("IncompleteBody", "The request body terminated unexpectedly")},
		{"bad digest", damagedAnswer("BadDigest", "The Content-MD5 you specified did not match what we received.")},
		{"body changed on the way", damageBody},
	}
	writes := []struct {
		name string
		size int
		opts ports.PutObjectOptions
		// damaged tells the request whose body is damaged.
		damaged func(r *http.Request, key string) bool
	}{
		{"put", 10, ports.PutObjectOptions{}, func(r *http.Request, key string) bool {
			return r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/"+key)
		}},
		{"put if absent", 10, ports.PutObjectOptions{IfAbsent: true}, func(r *http.Request, key string) bool {
			return r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/"+key)
		}},
		{"part of a multipart put", 9 << 20, ports.PutObjectOptions{}, func(r *http.Request, key string) bool {
			return r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/"+key) && r.URL.Query().Has("partNumber")
		}},
	}
	for i, d := range damages {
		for j, w := range writes {
			key := string(rune('a'+i)) + string(rune('a'+j))
			content := bytes.Repeat([]byte(key), w.size/2)
			t.Run(d.name+"/"+w.name+"/once", func(t *testing.T) {
				endpoint, damaged := startInterceptor(t, c.Endpoint, func(r *http.Request) bool { return w.damaged(r, key) }, d.damage)
				s := openVia(t, c, endpoint)
				if _, err := s.Put(t.Context(), key, bytes.NewReader(content), w.opts); err != nil {
					t.Fatalf("a %s whose body arrived damaged once failed: %v", w.name, err)
				}
				if damaged.Load() != 1 {
					t.Fatalf("the proxy damaged %d requests, want 1: the test did not damage where it meant to", damaged.Load())
				}
				if got := contracttests.ObjectContent(t, direct, key); got != string(content) {
					t.Fatalf("the object holds %d bytes, want the %d the %s sent", len(got), len(content), w.name)
				}
			})
			t.Run(d.name+"/"+w.name+"/always", func(t *testing.T) {
				var damaged atomic.Int64
				s := openThroughProxy(t, c, func(rw http.ResponseWriter, r *http.Request, forward http.Handler) {
					if w.damaged(r, "always"+key) {
						damaged.Add(1)
						d.damage(rw, r, forward)
						return
					}
					forward.ServeHTTP(rw, r)
				})
				_, err := s.Put(t.Context(), "always"+key, bytes.NewReader(content), w.opts)
				if err == nil || errors.Is(err, ports.ErrInvalidArgument) {
					t.Fatalf("a %s whose body arrived damaged each time: %v, want an error that is not ports.ErrInvalidArgument", w.name, err)
				}
				if damaged.Load() < 2 {
					t.Fatalf("the proxy damaged %d requests, want it sent again", damaged.Load())
				}
				if _, err := direct.Stat(t.Context(), "always"+key); !errors.Is(err, ports.ErrNotFound) {
					t.Fatalf("Stat after the failed %s: %v, want ports.ErrNotFound", w.name, err)
				}
			})
		}
	}
}
