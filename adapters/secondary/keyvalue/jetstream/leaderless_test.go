package jetstream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/keyvalue/jetstream"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// The bucket's stream, on three replicas, loses two of its nodes and so
// has no leader: every sending of a Set finds no responder, no stream took
// it, and it fails as not done, which the caller may send again. Before, it failed as an
// error of no kind, a 500, "may or may not have happened".
func TestASetNoStreamLeaderTookIsNotDone(t *testing.T) {
	servers := natstest.StartCluster(t)
	c := jetstream.Config{Bucket: "LEADERLESS", Replicas: 3}
	if err := open(t, natstest.URLs(servers...), c).Set(t.Context(), "k", []byte("before"), 0); err != nil {
		t.Fatal(err)
	}
	survivor := -1
	for i, srv := range servers {
		if !srv.JetStreamIsStreamLeader("$G", "KV_LEADERLESS") {
			survivor = i
		}
	}
	if survivor < 0 {
		t.Fatal("every node leads the bucket's stream")
	}
	// The store under test is connected to the node that stays.
	s := open(t, servers[survivor].ClientURL(), c)
	for i, srv := range servers {
		if i != survivor {
			srv.Shutdown()
		}
	}
	// The survivor drops the interest of the nodes gone with their routes;
	// a sending forwarded to one before that goes unanswered.
	deadline := time.Now().Add(30 * time.Second)
	for servers[survivor].NumRoutes() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the survivor kept its routes to the nodes stopped")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// On a busy machine the stream's leadership can move to the survivor
	// between the look above and the shutdown: as leader it takes a
	// sending and proposes it to replicas that never answer, so the write
	// is rightly of unknown outcome. The test is of a stream with no
	// leader; the survivor steps down once it finds no quorum.
	for servers[survivor].JetStreamIsStreamLeader("$G", "KV_LEADERLESS") {
		if time.Now().After(deadline) {
			t.Fatal("the survivor still leads the bucket's stream, alone")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	err := s.Set(ctx, "k", []byte("after"), 0)
	if !errors.Is(err, ports.ErrNotDone) {
		t.Fatalf("Set while the bucket's stream has no leader: %v, want it not done", err)
	}
}
