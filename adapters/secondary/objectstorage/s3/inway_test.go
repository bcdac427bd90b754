package s3_test

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/abi-engine/engine/ports"
)

// startCounter forwards every request to the server at endpoint and counts
// those count matches. It returns the endpoint to give the store instead.
func startCounter(t *testing.T, endpoint string, count func(*http.Request) bool) (string, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	return startProxy(t, endpoint, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		if count(r) {
			n.Add(1)
		}
		forward.ServeHTTP(w, r)
	}), &n
}

// A put onto a key that another object's path truly runs into, a folder of
// other keys or a key under an object, is refused after one sending: the
// refusal is no race with a delete (TestPutsAndDeletesOfKeysUnderOnePrefixAllSucceed),
// and sending it again cannot store it. Before, every such put was sent
// five times back to back, its whole body each time (up to 8 MiB), before
// the conflict was answered.
func TestAPutOntoAKeyAnotherObjectIsInTheWayOfIsSentOnce(t *testing.T) {
	c := server(t)
	c.Bucket = newBucket(t, c)
	direct := open(t, c)
	for _, key := range []string{"folder/inside", "file"} {
		if _, err := direct.Put(t.Context(), key, strings.NewReader(key), ports.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ key, inTheWay string }{
		{"folder", "folder/inside"},
		{"file/under", "file"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			endpoint, puts := startCounter(t, c.Endpoint, func(r *http.Request) bool {
				return r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/"+tc.key)
			})
			via := c
			via.Endpoint = endpoint
			s := open(t, via)
			// A small body: versitygw refuses before it reads one, and a
			// larger one meets a reset, which the proxy answers 502 and the
			// SDK sends again on its own.
			_, err := s.Put(t.Context(), tc.key, bytes.NewReader(bytes.Repeat([]byte("p"), 16<<10)), ports.PutObjectOptions{})
			if !errors.Is(err, ports.ErrConflict) {
				t.Fatalf("a put of %q beside %q: %v, want ports.ErrConflict", tc.key, tc.inTheWay, err)
			}
			if n := puts.Load(); n != 1 {
				t.Fatalf("a put of %q beside %q was sent %d times, want once", tc.key, tc.inTheWay, n)
			}
		})
	}
}
