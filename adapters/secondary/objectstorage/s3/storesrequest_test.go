package s3_test

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/abi-engine/engine/ports"
)

// A 400 the service answers to a request the store built itself, not for
// anything the caller gave, is the store's or the service's error, never
// the caller's invalid argument (which the API answers 400, telling the
// caller to change its request). Here a part of the upload is replaced
// under the Put, as another writer of the upload or a fault of the
// service would: versitygw refuses the completion 400 InvalidPart, as the
// part it names by its ETag is not the part it holds. Before, every 400
// the store did not know was the caller's invalid argument.
func TestA400ToARequestTheStoreBuiltIsNeverTheCallersInvalidArgument(t *testing.T) {
	c := server(t)
	c.Bucket = newBucket(t, c)
	key := "replaced"
	var answered smithy.APIError
	s := openThroughProxy(t, c, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		if isCompletion(r) {
			if _, err := admin(c).UploadPart(r.Context(), &s3.UploadPartInput{
				Bucket: aws.String(c.Bucket), Key: aws.String(key), UploadId: aws.String(r.URL.Query().Get("uploadId")),
				PartNumber: aws.Int32(1), Body: bytes.NewReader(bytes.Repeat([]byte("o"), 6<<20)),
			}); err != nil {
				t.Errorf("replace part 1 of the upload: %v", err)
			}
		}
		forward.ServeHTTP(w, r)
	})
	_, err := s.Put(t.Context(), key, bytes.NewReader(bytes.Repeat([]byte("c"), 9<<20)), ports.PutObjectOptions{})
	if !errors.As(err, &answered) || answered.ErrorCode() != "InvalidPart" {
		t.Fatalf("a Put whose part was replaced under it: %v, want the service's 400 InvalidPart", err)
	}
	if errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), "InvalidPart") {
		t.Fatalf("a Put whose completion the service refused 400 InvalidPart: %v, want the service's error, never ErrInvalidArgument", err)
	}
	if _, err := s.Stat(t.Context(), key); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Stat after the refused completion: %v, want ports.ErrNotFound", err)
	}
}
