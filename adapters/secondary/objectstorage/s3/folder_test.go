package s3_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

// versitygw keeps objects as files, so a key that is a folder of others
// ("a" beside "a/b") cannot hold an object. A put there is refused as a
// conflict whatever its size, and the objects under the folder are left as
// they were. Before, a put of one request was refused so (versitygw
// answers 409 ExistingObjectIsDirectory), but one of a part or more
// (multipart, 8 MiB and up) failed as an internal error (500): versitygw
// answers its completion 500 InternalError, as if the server had failed.
func TestAPutOntoAKeyThatIsAFolderOfOthersIsAConflictWhateverItsSize(t *testing.T) {
	c := server(t)
	c.Bucket = newBucket(t, c)
	s := open(t, c)
	if _, err := s.Put(t.Context(), "a/b", strings.NewReader("inside"), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{10, 9 << 20} {
		for _, opts := range []ports.PutObjectOptions{{}, {IfAbsent: true}} {
			_, err := s.Put(t.Context(), "a", bytes.NewReader(bytes.Repeat([]byte("o"), size)), opts)
			if !errors.Is(err, ports.ErrConflict) {
				t.Fatalf("a put of %d bytes %+v onto %q, a folder of %q: %v, want ports.ErrConflict", size, opts, "a", "a/b", err)
			}
		}
	}
	if got := contracttests.ObjectContent(t, s, "a/b"); got != "inside" {
		t.Fatalf("%q holds %q after the refused puts, want %q", "a/b", got, "inside")
	}
	uploads, err := admin(c).ListMultipartUploads(t.Context(), &s3.ListMultipartUploadsInput{Bucket: aws.String(c.Bucket)})
	if err != nil {
		t.Fatal(err)
	}
	if len(uploads.Uploads) > 0 {
		t.Fatalf("the refused puts left %d multipart uploads behind", len(uploads.Uploads))
	}
}
