package s3_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/abi-engine/engine/ports"
)

// S3 refuses a range of an empty object, and Get then looks at the object
// to tell an empty range from a range past the end. When the object was
// replaced by a longer one in between, the range is there after all: Get
// asks for it again and answers with the new object's bytes, where it
// answered a valid request as invalid (a 400). Here a proxy holds back
// S3's refusal of the first ranged read until the object is replaced.
func TestARangeOfAnObjectReplacedAfterS3RefusedItAsPastTheEndIsReadAgain(t *testing.T) {
	c := server(t)
	c.Bucket = newBucket(t, c)
	direct := open(t, c)
	const key = "grows"
	if _, err := direct.Put(t.Context(), key, strings.NewReader(""), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	content := bytes.Repeat([]byte("g"), 100)
	endpoint, held := startInterceptor(t, c.Endpoint, func(r *http.Request) bool {
		return r.Method == http.MethodGet && r.Header.Get("Range") != "" && strings.HasSuffix(r.URL.Path, "/"+key)
	}, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		answer := httptest.NewRecorder()
		forward.ServeHTTP(answer, r)
		if answer.Code != http.StatusRequestedRangeNotSatisfiable {
			t.Errorf("S3 answered the first ranged read of an empty object %d, want 416: the test does not cause what it means to", answer.Code)
		}
		if _, err := direct.Put(r.Context(), key, bytes.NewReader(content), ports.PutObjectOptions{}); err != nil {
			t.Errorf("replace the object: %v", err)
		}
		for k, v := range answer.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(answer.Code)
		_, _ = w.Write(answer.Body.Bytes())
	})
	via := c
	via.Endpoint = endpoint
	s := open(t, via)

	body, info, err := s.Get(t.Context(), key, ports.GetObjectOptions{Offset: 0, Length: 8})
	if err != nil {
		t.Fatalf("a range read as the object grew failed: %v", err)
	}
	defer body.Close()
	got, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	if held.Load() != 1 {
		t.Fatalf("the proxy held back %d answers, want 1", held.Load())
	}
	if !bytes.Equal(got, content[:8]) || info.Size != int64(len(content)) {
		t.Fatalf("read %q of an object of %d bytes, want %q of %d", got, info.Size, content[:8], len(content))
	}
}
