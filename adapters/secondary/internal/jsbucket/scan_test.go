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
