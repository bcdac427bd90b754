package s3_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/abi-engine/engine/ports"
)

// versitygw keeps each segment of a key as a file or directory name, which
// holds at most 255 bytes. A Put of a key with a longer segment is refused
// as invalid and leaves nothing behind: the key's first segment stays free
// for another caller's object. Before, such a Put was a conflict (409) or
// an internal error (500) depending on its size, and left a directory the
// S3 API neither lists nor deletes, so that "p" could no longer be stored.
func TestAKeyWithASegmentLongerThanAFileNameIsRefusedAndLeavesNothing(t *testing.T) {
	c := server(t)
	c.Bucket = newBucket(t, c)
	s := open(t, c)
	long := []string{
		"p/" + strings.Repeat("c", 256),
		strings.Repeat("d", 256) + "/q",
		strings.Repeat("é", 128),
	}
	for _, key := range long {
		for _, size := range []int{10, 12 << 20} { // one request, and multipart
			_, err := s.Put(t.Context(), key, bytes.NewReader(make([]byte, size)), ports.PutObjectOptions{})
			if !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), "255") {
				t.Errorf("Put of %d bytes under %.20q… (%d bytes): %v, want ErrInvalidArgument naming the limit of 255", size, key, len(key), err)
			}
		}
	}
	for _, key := range []string{"p", "p/" + strings.Repeat("c", 255), strings.Repeat("é", 127) + "e"} {
		if _, err := s.Put(t.Context(), key, strings.NewReader(key), ports.PutObjectOptions{}); err != nil {
			t.Errorf("Put %.20q… (%d bytes) after the refused Puts: %v", key, len(key), err)
			continue
		}
		if err := s.Delete(t.Context(), key); err != nil {
			t.Errorf("Delete %.20q…: %v", key, err)
		}
	}
}
