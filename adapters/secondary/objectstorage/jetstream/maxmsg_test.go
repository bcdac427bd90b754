package jetstream_test

import (
	"bytes"
	"io"
	"strings"
	"testing"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/abi-engine/engine/adapters/secondary/internal/jsbucket"
	"github.com/abi-engine/engine/adapters/secondary/objectstorage/jetstream"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

// A bucket whose largest message is the least Open accepts takes every
// object: chunks, and the description of an object whose key is the
// longest and all control characters, each escaped in six bytes of JSON.
func TestABucketWithTheLeastLargestMessageOpenAcceptsTakesEveryObject(t *testing.T) {
	url := natstest.StartProcess(t, server)
	js, err := natsjs.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(t.Context(), natsjs.StreamConfig{
		Name: "OBJ_ROOMY", Subjects: []string{"$O.ROOMY.C.>", "$O.ROOMY.M.>"},
		AllowRollup: true, AllowDirect: true, Discard: natsjs.DiscardNew, MaxMsgSize: jsbucket.ObjectMessageRoom,
	}); err != nil {
		t.Fatal(err)
	}
	s := open(t, url, jetstream.Config{Bucket: "ROOMY"})
	key := strings.Repeat("\x01", storecheck.MaxKey)
	body := bytes.Repeat([]byte("0123456789abcdef"), 3*jsbucket.ObjectChunkSize/16+5)
	if _, err := s.Put(t.Context(), key, bytes.NewReader(body), ports.PutObjectOptions{ContentType: "application/octet-stream"}); err != nil {
		t.Fatalf("Put of %d bytes under a key of %d control characters: %v", len(body), len(key), err)
	}
	r, _, err := s.Get(t.Context(), key, ports.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("Get: %d bytes, err %v; want the %d put", len(got), err, len(body))
	}
}
