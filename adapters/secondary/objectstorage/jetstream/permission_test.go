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

	awaitChunkedObjects(t, natstest.Connect(t, url, nats.UserInfo("ops", "ops")), bucket, 0, "the refused Put left its own")
}
