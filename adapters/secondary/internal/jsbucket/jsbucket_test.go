package jsbucket

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

func TestOpenCreatesTheBucketWithTheConfiguredReplicas(t *testing.T) {
	url := natstest.URLs(natstest.StartCluster(t)...)
	nc := natstest.Connect(t, url)
	if _, err := Open(t.Context(), nc, Config{Bucket: "R3", Replicas: 3}, "test"); err != nil {
		t.Fatalf("Open: %v", err)
	}
	js, _ := jetstream.New(nc)
	s, err := js.Stream(t.Context(), "KV_R3")
	if err != nil {
		t.Fatalf("the bucket's stream: %v", err)
	}
	if c := s.CachedInfo().Config; c.Replicas != 3 || c.MaxMsgsPerSubject != 1 || !c.AllowMsgTTL {
		t.Fatalf("stream made with replicas %d, history %d, per-message TTL %v; want 3, 1, true",
			c.Replicas, c.MaxMsgsPerSubject, c.AllowMsgTTL)
	}
	// A second engine opens what the first made.
	if _, err := Open(t.Context(), natstest.Connect(t, url), Config{Bucket: "R3", Replicas: 3}, "test"); err != nil {
		t.Fatalf("second Open: %v", err)
	}
}

// A bucket someone made with other settings is refused, never changed:
// the error names the bucket and the setting.
func TestOpenRefusesABucketWithOtherSettings(t *testing.T) {
	nc := natstest.Connect(t, natstest.StartServer(t).ClientURL())
	if _, err := Open(t.Context(), nc, Config{Bucket: "ONE"}, "test"); err != nil {
		t.Fatalf("Open: %v", err)
	}
	js, _ := jetstream.New(nc)
	if _, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "PLAIN", History: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "HISTORY", History: 5, LimitMarkerTTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		config  Config
		setting string
	}{
		{Config{Bucket: "ONE", Replicas: 3}, "replicas 1"},
		{Config{Bucket: "PLAIN"}, "per-message TTL"},
		{Config{Bucket: "HISTORY"}, "history 5"},
	} {
		_, err := Open(t.Context(), nc, c.config, "test")
		if !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), "bucket "+c.config.Bucket+" ") ||
			!strings.Contains(err.Error(), c.setting) {
			t.Errorf("Open %+v: err %v, want ErrInvalidArgument naming the bucket and %q", c.config, err, c.setting)
		}
	}
	s, _ := js.Stream(t.Context(), "KV_ONE")
	if s.CachedInfo().Config.Replicas != 1 {
		t.Fatalf("the refused Open changed the bucket")
	}
}

func TestConfigCheck(t *testing.T) {
	for _, c := range []Config{{Bucket: ""}, {Bucket: "a.b"}, {Bucket: "a b"}, {Bucket: "ok", Replicas: 2}, {Bucket: "ok", Replicas: -1}, {Bucket: "ABI_ENGINE"}} {
		if err := c.Check("services.keyvalue.config"); !errors.Is(err, ports.ErrInvalidArgument) ||
			!strings.Contains(err.Error(), "services.keyvalue.config.") {
			t.Errorf("Check %+v: err %v, want ErrInvalidArgument naming the key", c, err)
		}
	}
	for _, c := range []Config{{Bucket: "ABI_KV"}, {Bucket: "a-b_C9", Replicas: 3}} {
		if err := c.Check("x"); err != nil {
			t.Errorf("Check %+v: %v", c, err)
		}
	}
}

// An object store bucket made by someone else so that the stream drops old
// messages is refused: an object's chunks all share one subject, so a limit
// of messages per subject keeps only an object's last chunk, and a size or
// count limit that discards old messages drops the chunks of objects
// already stored. Either would leave descriptions of objects whose content
// is gone, with every Put reported done. A bucket whose limits refuse new
// writes instead (the object store's own discard policy) is kept.
func TestOpenObjectsRefusesABucketThatDropsStoredChunks(t *testing.T) {
	nc := natstest.Connect(t, natstest.StartServer(t).ClientURL())
	js, _ := jetstream.New(nc)
	stream := func(bucket string, edit func(*jetstream.StreamConfig)) {
		t.Helper()
		sc := jetstream.StreamConfig{
			Name:        "OBJ_" + bucket,
			Subjects:    []string{"$O." + bucket + ".C.>", "$O." + bucket + ".M.>"},
			AllowRollup: true, AllowDirect: true, Discard: jetstream.DiscardNew,
		}
		edit(&sc)
		if _, err := js.CreateStream(t.Context(), sc); err != nil {
			t.Fatalf("make stream %s: %v", sc.Name, err)
		}
	}
	stream("PERSUBJECT", func(sc *jetstream.StreamConfig) { sc.MaxMsgsPerSubject = 1 })
	stream("OLDBYTES", func(sc *jetstream.StreamConfig) { sc.Discard, sc.MaxBytes = jetstream.DiscardOld, 1<<20 })
	stream("OLDMSGS", func(sc *jetstream.StreamConfig) { sc.Discard, sc.MaxMsgs = jetstream.DiscardOld, 100 })
	// A chunk does not fit in a message: every Put of more than a few
	// bytes failed, as a 500, while the bucket opened.
	stream("SMALLMSGS", func(sc *jetstream.StreamConfig) { sc.MaxMsgSize = 64 << 10 })
	for _, c := range []struct{ bucket, setting string }{
		{"PERSUBJECT", "messages per subject 1"},
		{"OLDBYTES", "discard policy"},
		{"OLDMSGS", "discard policy"},
		{"SMALLMSGS", "max_msg_size) of 65536"},
	} {
		_, err := OpenObjects(t.Context(), nc, Config{Bucket: c.bucket}, "test")
		if !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), "bucket "+c.bucket+" ") ||
			!strings.Contains(err.Error(), c.setting) {
			t.Errorf("OpenObjects %s: err %v, want ErrInvalidArgument naming the bucket and %q", c.bucket, err, c.setting)
		}
	}
	if _, err := js.CreateObjectStore(t.Context(), jetstream.ObjectStoreConfig{Bucket: "BOUNDED", MaxBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenObjects(t.Context(), nc, Config{Bucket: "BOUNDED"}, "test"); err != nil {
		t.Fatalf("OpenObjects of an object store with a size limit that refuses new writes: %v", err)
	}
	stream("ROOMY", func(sc *jetstream.StreamConfig) { sc.MaxMsgSize = ObjectMessageRoom })
	if _, err := OpenObjects(t.Context(), nc, Config{Bucket: "ROOMY"}, "test"); err != nil {
		t.Fatalf("OpenObjects of an object store whose messages hold a chunk and its headers: %v", err)
	}
}

// An object store bucket whose stream denies rollups (as one that denies
// purges must) is refused when opened, naming the setting: a Put makes an
// object visible by a rollup of its description, so every Put failed, and
// where purges were denied too the chunks each failed Put had written
// stayed in the stream for good, since a purge that fails is left behind.
func TestOpenObjectsRefusesABucketThatDeniesRollups(t *testing.T) {
	nc := natstest.Connect(t, natstest.StartServer(t).ClientURL())
	js, _ := jetstream.New(nc)
	for _, c := range []struct {
		bucket, setting string
		edit            func(*jetstream.StreamConfig)
	}{
		{"NOPURGE", "rollup", func(sc *jetstream.StreamConfig) { sc.AllowRollup, sc.DenyPurge = false, true }},
		{"NOROLLUP", "rollup", func(sc *jetstream.StreamConfig) { sc.AllowRollup = false }},
	} {
		sc := jetstream.StreamConfig{
			Name:        "OBJ_" + c.bucket,
			Subjects:    []string{"$O." + c.bucket + ".C.>", "$O." + c.bucket + ".M.>"},
			AllowRollup: true, AllowDirect: true, Discard: jetstream.DiscardNew,
		}
		c.edit(&sc)
		if _, err := js.CreateStream(t.Context(), sc); err != nil {
			t.Fatalf("make stream %s: %v", sc.Name, err)
		}
		_, err := OpenObjects(t.Context(), nc, Config{Bucket: c.bucket}, "test")
		if !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), "bucket "+c.bucket+" ") ||
			!strings.Contains(err.Error(), c.setting) {
			t.Errorf("OpenObjects %s: err %v, want ErrInvalidArgument naming the bucket and %q", c.bucket, err, c.setting)
		}
	}
}

// A broker whose largest message cannot hold a chunk and its headers is
// refused when the object store opens, naming max_payload and the least
// it needs, and no bucket is made. Before, the store opened and every Put
// of an object over a few bytes failed, as too large.
func TestOpenObjectsRefusesABrokerWhoseMessagesCannotHoldAChunk(t *testing.T) {
	s := natstest.StartWith(t, &server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true, MaxPayload: 64 << 10,
	})
	nc := natstest.Connect(t, s.ClientURL())
	_, err := OpenObjects(t.Context(), nc, Config{Bucket: "SMALLPAYLOAD"}, "test")
	if !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), "max_payload is 65536") {
		t.Fatalf("OpenObjects on a broker of messages up to 64 KiB: %v, want ErrInvalidArgument naming max_payload", err)
	}
	js, _ := jetstream.New(nc)
	if _, err := js.Stream(t.Context(), "OBJ_SMALLPAYLOAD"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("the refused Open left a stream: %v", err)
	}
}

// A bucket that the deployed permissions do not let the engine's user
// read or make fails to open as soon as the server refuses the publish,
// naming the subject, well within a context shorter than the 6 s one
// attempt's request would wait. Before, the open waited out that request
// and only then looked for the refusal.
func TestOpenOfABucketTheUsersPermissionsDoNotCoverFailsWithoutWaitingForAnAnswer(t *testing.T) {
	d := natstest.StartDeployed(t)
	ctx, cancel := context.WithTimeout(t.Context(), attemptTimeout)
	t.Cleanup(cancel)
	_, err := Open(ctx, d.Connect(t, "engine_a"), Config{Bucket: "NOT_PERMITTED"}, "test")
	if !errors.Is(err, ErrPermission) || !strings.Contains(err.Error(), "KV_NOT_PERMITTED") {
		t.Fatalf("Open: %v; want ErrPermission naming the stream KV_NOT_PERMITTED", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("Open named the refusal only once its context of %v had ended", attemptTimeout)
	}
}
