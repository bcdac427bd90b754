package app_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/abi-engine/engine/adapters/secondary/lease/jetstream"
	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/app/config"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
)

// bucket_replicas applies when the lease bucket is made. A serving engine
// configured for three replicas finds the account's bucket on one: it
// refuses to start, naming both counts, and touches no lease. Before, it
// served on the one replica without a word, where a single server's loss
// takes the lease's record and the fencing with it. An engine of role auto
// (a command) with the same configuration starts on the bucket as it is.
func TestAServingEngineRefusesALeaseBucketOnFewerReplicasThanConfigured(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	nc := natstest.Connect(t, url)
	if _, err := jetstream.Open(t.Context(), nc, jetstream.Options{}); err != nil {
		t.Fatal(err)
	}
	configured := func(role string) *config.Config {
		yaml := fmt.Sprintf("nats:\n  url: %s\n  engine: {role: %s, bucket_replicas: 3, lease_seconds: 1, drain_seconds: 1}\nhttp: {listen: \"off\"}\ndata_dir: %s\n%s",
			url, role, filepath.Join(t.TempDir(), "data"), memoryServices)
		cfg, err := config.Parse("test.yaml", []byte(yaml), func(string) string { return "" })
		if err != nil {
			t.Fatalf("config: %v", err)
		}
		return cfg
	}

	a := fx.New(app.Graph(options(configured("serve"))), fx.NopLogger, fx.StartTimeout(30*time.Second))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := a.Start(ctx)
	if err == nil {
		_ = a.Stop(ctx)
		t.Fatal("a serving engine configured for three replicas started on a lease bucket on one")
	}
	if !strings.Contains(err.Error(), "has 1 replica(s)") || !strings.Contains(err.Error(), "bucket_replicas is 3") {
		t.Fatalf("the start failed with %q, which does not name both replica counts", err)
	}

	e, b := start(t, configured("auto"))
	if e.Outcome() != domain.OutcomeServe {
		t.Fatalf("an engine of role auto alone on the account: outcome %v, want serve", e.Outcome())
	}
	b.RequireStop()
}
