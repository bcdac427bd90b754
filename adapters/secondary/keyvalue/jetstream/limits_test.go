package jetstream_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/abi-engine/engine/adapters/secondary/keyvalue/jetstream"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// An operator may make the bucket with a largest value (`nats kv add
// --max-value-size`): a value over it is refused as too large, which the
// API answers 413, and nothing is stored.
func TestAValueOverTheBucketsLargestValueIsRefusedAsTooLarge(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	js, err := natsjs.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(t.Context(), natsjs.KeyValueConfig{
		Bucket: "SMALL", History: 1, LimitMarkerTTL: time.Minute, MaxValueSize: 1024,
	}); err != nil {
		t.Fatalf("make the bucket: %v", err)
	}
	s := open(t, url, jetstream.Config{Bucket: "SMALL"})
	big := bytes.Repeat([]byte("x"), 2048)

	err = s.Set(t.Context(), "k", big, 0)
	if !errors.Is(err, ports.ErrTooLarge) || !strings.Contains(err.Error(), "2048 bytes") {
		t.Fatalf("Set of 2048 bytes into a bucket of values up to 1024: %v, want ErrTooLarge naming the size", err)
	}
	ok, err := s.SetIfAbsent(t.Context(), "k", big, time.Minute)
	if ok || !errors.Is(err, ports.ErrTooLarge) {
		t.Fatalf("SetIfAbsent of 2048 bytes into a bucket of values up to 1024: %v %v, want false, ErrTooLarge", ok, err)
	}
	if _, err := s.Get(t.Context(), "k"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Get after the refused writes: %v, want ErrNotFound", err)
	}
	if err := s.Set(t.Context(), "k", big[:512], 0); err != nil {
		t.Fatalf("Set of 512 bytes: %v", err)
	}
}
