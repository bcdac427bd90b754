package jetstream_test

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/objectstorage/jetstream"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// A Get answered with an object reads the whole of that object, to the
// last byte and its digest, though a Put replaces the object or a Delete
// removes it while the Get streams, as a Get of a file or of S3 does; the
// chunks go once the reader ends, by its Close or by the end of its
// caller's context. Before, the Put or Delete purged the chunks under the
// reader, which failed part way with not found.
func TestAGetStreamingWhileItsObjectIsReplacedReadsTheWholeObjectItDescribed(t *testing.T) {
	url := natstest.StartProcess(t, server)
	old := bytes.Repeat([]byte("0123456789abcdef"), 3*8192+100) // four chunks
	for _, tc := range []struct {
		name    string
		replace func(ctx context.Context, s *jetstream.Store) error
		left    int // chunk subjects once the reader ended
		// abandon ends the reader by ending its caller's context, not by
		// Close.
		abandon bool
	}{
		{name: "Put", left: 1, replace: func(ctx context.Context, s *jetstream.Store) error {
			_, err := s.Put(ctx, "o", strings.NewReader("new"), ports.PutObjectOptions{})
			return err
		}},
		{name: "Delete", left: 0, replace: func(ctx context.Context, s *jetstream.Store) error {
			return s.Delete(ctx, "o")
		}},
		{name: "PutThenTheCallerGivesUp", left: 1, abandon: true, replace: func(ctx context.Context, s *jetstream.Store) error {
			_, err := s.Put(ctx, "o", strings.NewReader("new"), ports.PutObjectOptions{})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bucket := "GETREPLACED" + strings.ToUpper(tc.name)
			s := open(t, url, jetstream.Config{Bucket: bucket})
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			if _, err := s.Put(ctx, "o", bytes.NewReader(old), ports.PutObjectOptions{}); err != nil {
				t.Fatal(err)
			}
			getCtx, cancelGet := context.WithCancel(ctx)
			defer cancelGet()
			r, info, err := s.Get(getCtx, "o", ports.GetObjectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			head := make([]byte, 1000)
			if _, err := io.ReadFull(r, head); err != nil {
				t.Fatal(err)
			}
			if err := tc.replace(ctx, s); err != nil {
				t.Fatal(err)
			}
			if tc.abandon {
				cancelGet()
				waitChunkSubjects(t, url, bucket, tc.left, 30*time.Second)
				return
			}
			rest, err := io.ReadAll(r)
			if err != nil {
				t.Fatalf("the Get of %s (ETag %s) failed after %d bytes, as a %s came: %v", info.Key, info.ETag, len(head)+len(rest), tc.name, err)
			}
			if got := append(head, rest...); !bytes.Equal(got, old) {
				t.Fatalf("the Get read %d bytes, not the %d of the object it described", len(got), len(old))
			}
			_ = r.Close()
			waitChunkSubjects(t, url, bucket, tc.left, 30*time.Second)
		})
	}
}

// waitChunkSubjects waits, within within, until the bucket's stream holds
// the chunks of want objects.
func waitChunkSubjects(t *testing.T, url, bucket string, want int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := chunkSubjects(t, url, bucket)
		if len(got) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream holds the chunks of %d objects, want %d: %v", len(got), want, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
