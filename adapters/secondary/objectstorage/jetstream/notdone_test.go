package jetstream_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/abi-engine/engine/adapters/secondary/objectstorage/jetstream"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// A Put whose chunks are stored but whose description no stream takes
// (the stream no longer has the descriptions' subjects, so each sending
// finds no responder) stored no object: it fails as not done, and purges
// its chunks. Before, it was reported as a description that may have been
// stored, and its chunks stayed in the stream until a sweep.
func TestAPutWhoseDescriptionNoStreamTookIsNotDoneAndLeavesNoChunks(t *testing.T) {
	srv := natstest.StartServer(t)
	s := open(t, srv.ClientURL(), jetstream.Config{Bucket: "NODESC"})
	js, err := natsjs.New(natstest.Connect(t, srv.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(t.Context(), "OBJ_NODESC")
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.CachedInfo().Config
	cfg.Subjects = []string{"$O.NODESC.C.>"}
	if _, err := js.UpdateStream(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	_, err = s.Put(ctx, "a", strings.NewReader(strings.Repeat("x", 300<<10)), ports.PutObjectOptions{})
	if !errors.Is(err, ports.ErrNotDone) {
		t.Fatalf("Put whose description no stream took: %v, want it not done", err)
	}
	info, err := stream.Info(t.Context(), natsjs.WithSubjectFilter("$O.NODESC.C.>"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(info.State.Subjects); n != 0 {
		t.Fatalf("%d objects' chunks left in the stream after a Put not done, want none", n)
	}
}
