package jetstream_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/abi-engine/engine/adapters/secondary/internal/jsbucket"
	"github.com/abi-engine/engine/adapters/secondary/objectstorage/jetstream"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// A Put whose description the NATS user may not publish fails with
// ErrPermission naming the description's subject, and purges the chunks
// it wrote: the server sent the description to no stream, so nothing
// names them. Before, the refusal was taken for a write of unknown
// outcome, and the chunks stayed in the stream for good.
func TestAPutWhoseDescriptionThePermissionsDenyPurgesItsChunks(t *testing.T) {
	const bucket = "DENIED"
	meta := "$O." + bucket + ".M.>"
	url := natstest.StartWith(t, &natsserver.Options{
		Host: "127.0.0.1", Port: natsserver.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		Users: []*natsserver.User{
			{Username: "ops", Password: "ops"},
			{Username: "engine", Password: "engine", Permissions: &natsserver.Permissions{
				Publish: &natsserver.SubjectPermission{Deny: []string{meta}},
			}},
		},
	}).ClientURL()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := jetstream.Open(ctx, jetstream.Config{Bucket: bucket, Replicas: 1}, natstest.Connect(t, url, nats.UserInfo("engine", "engine")))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })

	// More than one chunk, so the Put has chunks to leave behind.
	content := bytes.Repeat([]byte("denied"), 100<<10)
	_, err = s.Put(t.Context(), "o", bytes.NewReader(content), ports.PutObjectOptions{})
	if !errors.Is(err, jsbucket.ErrPermission) || !strings.Contains(err.Error(), "$O."+bucket+".M.") {
		t.Fatalf("Put: %v; want ErrPermission naming the description's subject", err)
	}

	js, err := natsjs.New(natstest.Connect(t, url, nats.UserInfo("ops", "ops")))
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(t.Context(), "OBJ_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	// A purge that gave up on a loaded machine may still be applied after
	// the call returned: the count is read until it comes down to none, or
	// a minute has passed.
	deadline := time.Now().Add(time.Minute)
	for {
		info, err := stream.Info(t.Context(), natsjs.WithSubjectFilter("$O."+bucket+".C.>"))
		n := -1
		if err == nil {
			n = len(info.State.Subjects)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the refused Put, the chunks of %d objects are in the stream (%v), want none", n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
