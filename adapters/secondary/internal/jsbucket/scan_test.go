package jsbucket

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/abi-engine/engine/internal/natstest"
)

// The broker places a scan's consumer on any replica, and a replica may
// lag: a scan right after acknowledged writes still sees every one. Many
// buckets at once make lagging replicas likely.
func TestScanSeesEveryAcknowledgedWriteOnAReplicatedBucket(t *testing.T) {
	url := natstest.URLs(natstest.StartCluster(t)...)
	var wg sync.WaitGroup
	for round := range 12 {
		wg.Go(func() {
			b, err := Open(t.Context(), natstest.Connect(t, url), Config{Bucket: fmt.Sprintf("S%d", round), Replicas: 3}, "test")
			if err != nil {
				t.Error(err)
				return
			}
			for i := range 20 {
				if _, err := b.Put(t.Context(), fmt.Sprintf("d.k%d", i), []byte("v"), 0, nil); err != nil {
					t.Error(err)
					return
				}
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
				n := 0
				err := b.Scan(ctx, "d.*", func(string, Entry) error { n++; return nil })
				cancel()
				if err != nil || n != i+1 {
					t.Errorf("bucket %d: scan after %d writes saw %d, %v", round, i+1, n, err)
				}
			}
		})
	}
	wg.Wait()
}

// A key that exists from before a scan to after it is seen by the scan,
// however often another caller rewrites it meanwhile. The batches stop at
// the barrier the scan wrote first, so a key rewritten before they reached
// its old message has its new one past the barrier, and the last batch
// may end before it. Writers rewrite keys while scans run, for a couple of
// seconds or until a scan misses one.
func TestScanSeesKeysRewrittenWhileItRuns(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	c := Config{Bucket: "S"}
	b, err := Open(t.Context(), natstest.Connect(t, url), c, "test")
	if err != nil {
		t.Fatal(err)
	}
	writer, err := Open(t.Context(), natstest.Connect(t, url), c, "test")
	if err != nil {
		t.Fatal(err)
	}
	// With the barrier the keys fill three batches exactly: the last one
	// has no room after the barrier but what a key rewritten before that
	// batch reached it left.
	const n = scanBatch*3 - 1
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				if _, err := writer.Put(t.Context(), fmt.Sprintf("d.k%d", i), []byte("v"), 0, nil); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// The writers stop when the test ends, on a context of their own:
	// t.Context is done before cleanups run.
	wctx, stop := context.WithCancel(context.Background())
	for w := range 4 {
		wg.Go(func() {
			for i := w; wctx.Err() == nil; i = (i + 7919) % n {
				if _, err := writer.Put(wctx, fmt.Sprintf("d.k%d", i), []byte("w"), 0, nil); err != nil && wctx.Err() == nil {
					t.Error(err)
					return
				}
			}
		})
	}
	t.Cleanup(func() { stop(); wg.Wait() })
	deadline := time.Now().Add(2 * time.Second)
	for round := 0; round < 20 && time.Now().Before(deadline); round++ {
		seen := 0
		if err := b.Scan(t.Context(), "d.*", func(string, Entry) error { seen++; return nil }); err != nil {
			t.Fatalf("round %d: Scan: %v", round, err)
		}
		if seen != n {
			t.Fatalf("round %d: Scan saw %d keys while %d existed throughout; rewrites by another caller hid %d", round, seen, n, n-seen)
		}
	}
}
