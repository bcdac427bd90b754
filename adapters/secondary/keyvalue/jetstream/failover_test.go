package jetstream_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/secondary/keyvalue/jetstream"
	"github.com/abi-engine/engine/internal/natstest"
)

// The node that leads the bucket's stream stops while writers write: every
// write that was acknowledged, before or after, reads back from the nodes
// left, and writing goes on once the stream has a new leader.
func TestANodeFailureLosesNoAcknowledgedWrite(t *testing.T) {
	servers := natstest.StartCluster(t)
	url := natstest.URLs(servers...)
	c := jetstream.Config{Bucket: "FAILOVER", Replicas: 3}
	conn := func() *nats.Conn {
		return natstest.Connect(t, url, nats.ReconnectWait(100*time.Millisecond), nats.MaxReconnects(-1))
	}
	open := func() *jetstream.Store {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		s, err := jetstream.Open(ctx, c, conn())
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}

	var (
		mu         sync.Mutex
		acked      = map[string]string{}
		failed     []string
		afterStop  atomic.Int64
		stopped    atomic.Bool
		stopWrites = make(chan struct{})
		wg         sync.WaitGroup
	)
	for w := range 4 {
		s := open()
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stopWrites:
					return
				default:
				}
				key, val := fmt.Sprintf("w%d/%d", w, n), fmt.Sprint(n)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := s.Set(ctx, key, []byte(val), 0)
				cancel()
				mu.Lock()
				if err != nil {
					failed = append(failed, fmt.Sprintf("%s: %v", key, err))
				} else {
					acked[key] = val
				}
				mu.Unlock()
				if err == nil && stopped.Load() {
					afterStop.Add(1)
				}
			}
		})
	}

	time.Sleep(time.Second)
	leader := -1
	for i, s := range servers {
		if s.JetStreamIsStreamLeader("$G", "KV_FAILOVER") {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no node leads the bucket's stream")
	}
	servers[leader].Shutdown()
	stopped.Store(true)
	deadline := time.Now().Add(30 * time.Second)
	for afterStop.Load() < 100 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	close(stopWrites)
	wg.Wait()
	if afterStop.Load() < 100 {
		t.Fatalf("only %d writes acknowledged in 30s after the leader stopped", afterStop.Load())
	}

	reader := open()
	lost := 0
	for key, val := range acked {
		got, err := reader.Get(t.Context(), key)
		if err != nil || string(got) != val {
			lost++
			if lost <= 5 {
				t.Errorf("acknowledged %s=%s reads %q, %v", key, val, got, err)
			}
		}
	}
	t.Logf("%d writes acknowledged (%d after node n%d stopped), %d failed, %d lost", len(acked), afterStop.Load(), leader+1, len(failed), lost)
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged writes lost", lost, len(acked))
	}
	if len(failed) > 0 {
		t.Fatalf("%d writes failed across the failover, first: %s", len(failed), failed[0])
	}
}
