package jetstream

import (
	"context"
	"testing"
	"time"

	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
)

// The revisions a watch delivers count toward the highest seen, from which
// a bucket made anew goes on. Before, only reads and this engine's own
// writes counted, so a standby that learnt of a new holder by its watch
// alone could make the bucket anew under that holder's term, when its
// clock was behind.
func TestAWatchCountsTheRevisionsItDelivers(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	watcher, err := Open(ctx, natstest.Connect(t, url), Options{Bucket: "WATCH"})
	if err != nil {
		t.Fatal(err)
	}
	holder, err := Open(ctx, natstest.Connect(t, url), Options{Bucket: "WATCH"})
	if err != nil {
		t.Fatal(err)
	}
	me := domain.ThisProcess("test", "")
	rev, err := holder.Create(ctx, me)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if rev, err = holder.Update(ctx, me, rev); err != nil {
			t.Fatal(err)
		}
	}
	got, err := watcher.WaitForChange(ctx, 0, 10*time.Second)
	if err != nil || got.Revision != rev {
		t.Fatalf("WaitForChange = %+v, %v; want revision %d", got, err, rev)
	}
	watcher.mu.Lock()
	highest := watcher.highest
	watcher.mu.Unlock()
	if highest != rev {
		t.Fatalf("after its watch delivered revision %d, the lease counts %d as the highest seen", rev, highest)
	}
}

func TestABucketMadeAnewStartsAboveTheHighestRevisionAndTheClock(t *testing.T) {
	now := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name    string
		highest uint64
		now     time.Time
		want    uint64
	}{
		{"the clock ahead of every revision seen", 41, now, uint64(now.UnixMicro())},
		{"a revision seen past the clock", uint64(now.UnixMicro()) + 7, now, uint64(now.UnixMicro()) + 8},
		{"a clock before 1970", 41, time.Unix(-5, 0), 42},
		{"nothing seen, the clock at zero", 0, time.Unix(0, 0), 1},
	} {
		if got := firstRevisionAnew(c.highest, c.now); got != c.want {
			t.Errorf("%s: firstRevisionAnew(%d, %v) = %d, want %d", c.name, c.highest, c.now, got, c.want)
		}
	}
}
