package jetstream_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/objectstorage/jetstream"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// Close gives the purges still owed to readers one purge's time in all: a
// store whose broker is gone closes within it, and the sweeps of the next
// store take what is left. Each purge had a timeout of its own, one after
// the other, so Close took 10 s for every object replaced under a reader.
func TestCloseWithManyPurgesOwedToReadersAndNoBrokerEndsWithinOnePurgeTimeout(t *testing.T) {
	srv := natstest.StartServer(t)
	s := open(t, srv.ClientURL(), jetstream.Config{Bucket: "CLOSEOWED"})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const objects = 8
	for i := range objects {
		key := fmt.Sprintf("o%d", i)
		if _, err := s.Put(ctx, key, strings.NewReader("old "+key), ports.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		r, _, err := s.Get(ctx, key, ports.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close() })
		if _, err := s.Put(ctx, key, strings.NewReader("new "+key), ports.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	srv.Shutdown()
	srv.WaitForShutdown()

	closed := make(chan struct{})
	start := time.Now()
	go func() {
		_ = s.Close()
		close(closed)
	}()
	// One purge's timeout is 10 s; one each made 80.
	select {
	case <-closed:
		t.Logf("Close took %v", time.Since(start).Round(time.Millisecond))
	case <-time.After(40 * time.Second):
		t.Fatalf("Close with %d purges owed and no broker has not returned in 40 s", objects)
	}
}
