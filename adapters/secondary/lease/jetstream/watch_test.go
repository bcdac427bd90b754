package jetstream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/secondary/lease/jetstream"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
)

// A standby waits in WaitForChange; stopping it cancels the call's context,
// and the call must end then, whatever the watch it is making is waiting
// for. Here the broker never answers the watch's consumer create (the
// user may not publish it), as a broker that is slow or electing a leader
// may not: the call returns the context's error within moments. Before,
// the watch was made on a context of its own and the stop waited out
// nats.go's 5 s default for the create.
func TestWaitForChangeEndsWhenItsContextIsCancelledWhileTheWatchIsMade(t *testing.T) {
	s := natstest.StartWith(t, &server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true,
		Users: []*server.User{{Username: "engine", Password: "pw", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{
				Allow: []string{">"},
				Deny:  []string{"$JS.API.CONSUMER.CREATE.KV_ABI_ENGINE", "$JS.API.CONSUMER.CREATE.KV_ABI_ENGINE.>"},
			},
		}}},
	})
	nc := natstest.Connect(t, s.ClientURL(), nats.UserInfo("engine", "pw"))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	l, err := jetstream.Open(ctx, nc, jetstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := l.Create(ctx, domain.Holder{InstanceID: "a"})
	if err != nil {
		t.Fatal(err)
	}

	stop, stopNow := context.WithCancel(ctx)
	defer stopNow()
	time.AfterFunc(100*time.Millisecond, stopNow)
	began := time.Now()
	_, err = l.WaitForChange(stop, rev, time.Minute)
	took := time.Since(began)
	if !errors.Is(err, context.Canceled) || took > 2*time.Second {
		t.Fatalf("WaitForChange returned %v after %v once its context was cancelled at 100 ms; want context.Canceled within 2 s", err, took)
	}
}
