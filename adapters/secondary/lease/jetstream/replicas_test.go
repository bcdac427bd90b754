package jetstream_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/lease/jetstream"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
)

// The replica count applies only when the bucket is made. A serving engine
// configured for three replicas must not run on a bucket kept on one,
// where a single server's loss takes the lease's record and every
// engine's fencing with it: its Open refuses the bucket, naming both
// counts. Before, the bucket was used as it was, silently. An engine that
// does not require the count (role auto, a command) uses it, warning.
func TestOpenRefusesALeaseBucketOnFewerReplicasThanConfiguredToAServingEngine(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	nc := natstest.Connect(t, url)
	if _, err := jetstream.Open(t.Context(), nc, jetstream.Options{Bucket: "ONE"}); err != nil {
		t.Fatal(err)
	}
	_, err := jetstream.Open(t.Context(), nc, jetstream.Options{Bucket: "ONE", Replicas: 3, RequireReplicas: true})
	if !errors.Is(err, domain.ErrInvalidConfig) || !strings.Contains(err.Error(), "has 1 replica(s)") || !strings.Contains(err.Error(), "bucket_replicas is 3") {
		t.Fatalf("Open for three replicas of a bucket on one: %v; want a configuration error naming both counts", err)
	}

	var logs bytes.Buffer
	l, err := jetstream.Open(t.Context(), nc, jetstream.Options{Bucket: "ONE", Replicas: 3, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("Open for three replicas of a bucket on one, not required: %v", err)
	}
	if _, err := l.Read(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "replicas=1 bucket_replicas=3") {
		t.Fatalf("no warning of the bucket's replica count in the log:\n%s", logs.String())
	}
}

// A bucket on more replicas than configured is used, by a serving engine
// too: an engine or command with the default configuration (one replica)
// works on an account whose lease bucket is on three.
func TestRealBrokerALeaseBucketOnMoreReplicasThanConfiguredIsUsed(t *testing.T) {
	url := natstest.URLs(natstest.StartCluster(t)...)
	nc := natstest.Connect(t, url)
	if _, err := jetstream.Open(t.Context(), nc, jetstream.Options{Bucket: "THREE", Replicas: 3, RequireReplicas: true}); err != nil {
		t.Fatal(err)
	}
	for _, require := range []bool{true, false} {
		l, err := jetstream.Open(t.Context(), nc, jetstream.Options{Bucket: "THREE", Replicas: 1, RequireReplicas: require})
		if err != nil {
			t.Fatalf("Open for one replica (required %v) of a bucket on three: %v", require, err)
		}
		if _, err := l.Read(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}
