package jetstream_test

import (
	"bytes"
	"errors"
	"fmt"
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

// An operator may bound the bucket's bytes (`nats kv add
// --max-bucket-size`): once it is full a write is refused as
// ports.ErrStorageFull, which the API answers 507, and what the bucket
// held stays. Before, it was a 500 like any other failure.
func TestAWriteToAFullBucketIsRefusedAsStorageFull(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	js, err := natsjs.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(t.Context(), natsjs.KeyValueConfig{
		Bucket: "FULL", History: 1, LimitMarkerTTL: time.Minute, MaxBytes: 16 << 10,
	}); err != nil {
		t.Fatalf("make the bucket: %v", err)
	}
	s := open(t, url, jetstream.Config{Bucket: "FULL"})
	value := bytes.Repeat([]byte("v"), 1024)
	stored := 0
	for ; stored < 64; stored++ {
		err = s.Set(t.Context(), fmt.Sprintf("k%02d", stored), value, 0)
		if err != nil {
			break
		}
	}
	if !errors.Is(err, ports.ErrStorageFull) || stored == 0 {
		t.Fatalf("Set of a 1 KiB value after %d into a bucket of 16 KiB: %v, want ErrStorageFull once it is full", stored, err)
	}
	ok, err := s.SetIfAbsent(t.Context(), "another", value, time.Minute)
	if ok || !errors.Is(err, ports.ErrStorageFull) {
		t.Fatalf("SetIfAbsent into the full bucket: %v %v, want false, ErrStorageFull", ok, err)
	}
	for i := range stored {
		if got, err := s.Get(t.Context(), fmt.Sprintf("k%02d", i)); err != nil || !bytes.Equal(got, value) {
			t.Fatalf("Get k%02d after the refused writes: %d bytes, %v; want the value stored", i, len(got), err)
		}
	}
}
