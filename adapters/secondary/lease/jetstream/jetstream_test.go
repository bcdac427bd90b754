package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/abi-engine/engine/adapters/secondary/lease/jetstream"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

var buckets atomic.Int64

// harness gives each subtest a bucket of its own on one broker, and each
// handle a connection of its own.
func harness(url string, replicas int) contracttests.Harness[ports.Lease] {
	return contracttests.HarnessFunc[ports.Lease](func(t *testing.T) func(*testing.T) ports.Lease {
		bucket := bucketName(t)
		return func(t *testing.T) ports.Lease {
			return open(t, url, jetstream.Options{Bucket: bucket, Replicas: replicas})
		}
	})
}

func bucketName(t *testing.T) string {
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, t.Name())
	return fmt.Sprintf("T%d_%s", buckets.Add(1), name)
}

func open(t *testing.T, url string, opts jetstream.Options) *jetstream.Lease {
	t.Helper()
	nc := natstest.Connect(t, url)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var (
		l   *jetstream.Lease
		err error
	)
	// A new R3 stream may not have a leader for its first request.
	for range 3 {
		if l, err = jetstream.Open(ctx, nc, opts); err == nil {
			return l
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("open lease bucket %s: %v", opts.Bucket, err)
	return nil
}

func TestLeaseContract(t *testing.T) {
	t.Run("jetstream", func(t *testing.T) {
		s := natstest.StartServer(t)
		contracttests.RunLease(t, harness(s.ClientURL(), 1))
	})
	t.Run("jetstream-r3", func(t *testing.T) {
		servers := natstest.StartCluster(t)
		contracttests.RunLease(t, harness(natstest.URLs(servers...), 3))
	})
}

func TestOpenCreatesTheBucketWithHistoryOne(t *testing.T) {
	s := natstest.StartServer(t)
	open(t, s.ClientURL(), jetstream.Options{})
	js, err := njs.New(natstest.Connect(t, s.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), jetstream.DefaultBucket)
	if err != nil {
		t.Fatalf("bucket %s: %v", jetstream.DefaultBucket, err)
	}
	st, err := kv.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.History() != 1 {
		t.Fatalf("bucket history %d, want 1", st.History())
	}
}

func TestOpenRefusesOtherReplicaCounts(t *testing.T) {
	s := natstest.StartServer(t)
	_, err := jetstream.Open(t.Context(), natstest.Connect(t, s.ClientURL()), jetstream.Options{Replicas: 2})
	if err == nil || !strings.Contains(err.Error(), "bucket_replicas") {
		t.Fatalf("Open with 2 replicas: err %v, want one naming bucket_replicas", err)
	}
}

// A value written by something other than an engine reads as a holder
// nobody can name, never as an error and never as a free lease.
func TestAForeignValueReadsAsAnUnknownHolder(t *testing.T) {
	s := natstest.StartServer(t)
	url := s.ClientURL()
	l := open(t, url, jetstream.Options{Bucket: "FOREIGN"})
	js, err := njs.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), "FOREIGN")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), jetstream.Key, []byte("not json")); err != nil {
		t.Fatal(err)
	}
	rec, err := l.Read(t.Context())
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if !rec.Present || rec.Free() || rec.Holder.InstanceID != "" || rec.Revision == 0 {
		t.Fatalf("foreign value reads %+v, want a present, unknown holder", rec)
	}
}

// The key deleted by an operator (nats kv del) reads as deleted, so the
// state machine knows a holder may still be serving.
func TestAnOperatorDeleteReadsAsDeleted(t *testing.T) {
	s := natstest.StartServer(t)
	url := s.ClientURL()
	l := open(t, url, jetstream.Options{Bucket: "OPERATOR"})
	if _, err := l.Create(t.Context(), domain.ThisProcess("test", "")); err != nil {
		t.Fatal(err)
	}
	js, err := njs.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), "OPERATOR")
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []func() error{
		func() error { return kv.Delete(t.Context(), jetstream.Key) },
		func() error { return kv.Purge(t.Context(), jetstream.Key) },
	} {
		if _, err := l.Create(t.Context(), domain.ThisProcess("test", "")); err != nil && !errorsIsTaken(err) {
			t.Fatal(err)
		}
		if err := op(); err != nil {
			t.Fatal(err)
		}
		rec, err := l.Read(t.Context())
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		if !rec.Deleted() {
			t.Fatalf("after an operator's delete or purge, Read gives %+v, want a deleted key", rec)
		}
	}
}

func errorsIsTaken(err error) bool { return err != nil && strings.Contains(err.Error(), "lease taken") }

// writtenBack fails t unless h, encoded and decoded, is h again (its start
// the same instant, without the monotonic reading JSON drops).
func writtenBack(t *testing.T, h domain.Holder) {
	t.Helper()
	got := jetstream.DecodeHolder(jetstream.EncodeHolder(h))
	if !got.StartedAt.Equal(h.StartedAt) {
		t.Fatalf("started_at %v written back as %v", h.StartedAt, got.StartedAt)
	}
	got.StartedAt = h.StartedAt
	if got != h {
		t.Fatalf("%+v written back as %+v", h, got)
	}
}

func TestHolderRoundTripsThroughJSON(t *testing.T) {
	h := domain.ThisProcess("1.0.0", "r7")
	h.Released = true
	h.Command = true
	h.Lease = 20 * time.Second
	writtenBack(t, h)
	for _, field := range []string{"instance_id", "host", "pid", "version", "rollout_id", "started_at", "released", "command", "lease_ms"} {
		if !strings.Contains(string(jetstream.EncodeHolder(h)), `"`+field+`"`) {
			t.Fatalf("value %s lacks field %s", jetstream.EncodeHolder(h), field)
		}
	}
}

var _ = nats.Connect

// FuzzDecodeHolder reads any value a key may hold, written by an engine or
// by anyone else with access to the bucket: it never panics, and a value it
// takes for an engine's writes back as the same holder, so a renewal or a
// release never changes who the record names.
func FuzzDecodeHolder(f *testing.F) {
	h := domain.ThisProcess("1.0.0", "r7")
	f.Add(jetstream.EncodeHolder(h))
	h.Released = true
	f.Add(jetstream.EncodeHolder(h))
	f.Add([]byte(`{"instance_id":"x"}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"instance_id":"` + h.InstanceID + `","pid":"1"}`))
	f.Fuzz(func(t *testing.T, value []byte) {
		got := jetstream.DecodeHolder(value)
		if got.InstanceID == "" {
			if got != (domain.Holder{}) {
				t.Fatalf("a value read as nobody's still names %+v", got)
			}
			return
		}
		if !domain.ValidInstanceID(got.InstanceID) {
			t.Fatalf("decoded an invalid instance id %q", got.InstanceID)
		}
		writtenBack(t, got)
	})
}

// A lease bucket made by hand with a TTL (nats kv add --ttl) is refused
// when the engine opens it, naming the setting. The server would drop a
// live holder's record between its renewals, and the holder, finding the
// key empty each time, would hold it anew a lease before serving, over
// and over: it never served, and a standby would take the empty key from
// it meanwhile.
func TestOpenRefusesALeaseBucketWhoseValuesExpire(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	const bucket = "WITH_TTL"
	js, err := njs.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(t.Context(), njs.KeyValueConfig{Bucket: bucket, History: 1, TTL: 200 * time.Millisecond}); err != nil {
		t.Fatalf("make the bucket by hand: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err = jetstream.Open(ctx, natstest.Connect(t, url), jetstream.Options{Bucket: bucket})
	if !errors.Is(err, domain.ErrInvalidConfig) || !strings.Contains(err.Error(), "max_age") {
		t.Fatalf("Open of a lease bucket with a TTL of 200ms: err %v, want an invalid configuration naming max_age", err)
	}
}
