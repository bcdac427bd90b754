package jsbucket

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/abi-engine/engine/internal/logbuf"
	"github.com/abi-engine/engine/internal/natstest"
)

// Keys whose values expire are written again just as the broker removes
// the expired values, on a replicated bucket: every write that was
// acknowledged still reads back once the broker has removed them all.
// The broker's markers of expiry, a rollup of their key each, were
// proposed after writes made meanwhile and deleted them.
func TestAWriteOverAValueTheBrokerIsExpiringIsNotDeletedByTheExpiry(t *testing.T) {
	nc := natstest.Connect(t, natstest.URLs(natstest.StartCluster(t)...))
	b, err := Open(t.Context(), nc, Config{Bucket: "EXPIRY", Replicas: 3}, "test")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	const keys = 400
	for round := range 3 {
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			failures []string
		)
		fail := func(f string, args ...any) {
			mu.Lock()
			defer mu.Unlock()
			failures = append(failures, fmt.Sprintf(f, args...))
		}
		for i := range keys {
			wg.Go(func() {
				token := Encode(fmt.Sprintf("r%d/k%d", round, i))
				if _, err := b.Put(t.Context(), token, []byte("old"), time.Second, nil); err != nil {
					fail("write %s with a TTL: %v", token, err)
					return
				}
				// Each key is written again at its own moment of the
				// second after its value's expiry, in which the broker
				// removes it.
				written := time.Now()
				time.Sleep(time.Until(written.Add(time.Second + time.Duration(i)*time.Second/keys)))
				if _, err := b.Put(t.Context(), token, []byte("new"), 0, nil); err != nil {
					fail("write %s again: %v", token, err)
				}
			})
		}
		wg.Wait()
		if len(failures) > 0 {
			t.Fatalf("round %d: %d writes failed, first: %s", round, len(failures), failures[0])
		}
		// The broker removes expired values in the order it stored them:
		// once it has removed one written after all of them, it has
		// removed them all, and proposed whatever marker it leaves.
		sentinel := Encode(fmt.Sprintf("r%d/sentinel", round))
		rev, err := b.Put(t.Context(), sentinel, []byte("x"), time.Second, nil)
		if err != nil {
			t.Fatalf("write the sentinel: %v", err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			e, err := b.Last(t.Context(), sentinel)
			if err != nil {
				t.Fatalf("read the sentinel: %v", err)
			}
			if e.Revision != rev {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the broker did not remove a value of TTL 1s in 30s", round)
			}
			time.Sleep(50 * time.Millisecond)
		}
		lost := 0
		for i := range keys {
			token := Encode(fmt.Sprintf("r%d/k%d", round, i))
			e, err := b.Last(t.Context(), token)
			if err != nil {
				t.Fatalf("read %s: %v", token, err)
			}
			if !e.Live || string(e.Value) != "new" {
				lost++
			}
		}
		if lost > 0 {
			t.Fatalf("round %d: %d of %d acknowledged writes made as their values expired are gone", round, lost, keys)
		}
	}
}

// A bucket made with the broker's markers of expiry (by an earlier engine,
// or nats.go's CreateKeyValue) is opened without them, every other setting
// kept.
func TestOpenTurnsOffTheBrokersMarkersOfExpiry(t *testing.T) {
	nc := natstest.Connect(t, natstest.StartServer(t).ClientURL())
	js, _ := jetstream.New(nc)
	if _, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{
		Bucket: "MARKED", History: 1, LimitMarkerTTL: time.Minute, MaxValueSize: 4096,
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(t.Context(), nc, Config{Bucket: "MARKED"}, "test"); err != nil {
		t.Fatalf("Open: %v", err)
	}
	if _, err := Open(t.Context(), nc, Config{Bucket: "FRESH"}, "test"); err != nil {
		t.Fatalf("Open: %v", err)
	}
	for _, name := range []string{"KV_MARKED", "KV_FRESH"} {
		s, err := js.Stream(t.Context(), name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		c := s.CachedInfo().Config
		if c.SubjectDeleteMarkerTTL != 0 || !c.AllowMsgTTL || c.MaxMsgsPerSubject != 1 || !c.AllowDirect {
			t.Errorf("stream %s: markers of expiry for %v, per-message TTL %v, history %d, direct get %v; want none, true, 1, true",
				name, c.SubjectDeleteMarkerTTL, c.AllowMsgTTL, c.MaxMsgsPerSubject, c.AllowDirect)
		}
		if name == "KV_MARKED" && c.MaxMsgSize != 4096 {
			t.Errorf("stream %s: largest message %d, want the 4096 it was made with", name, c.MaxMsgSize)
		}
	}
}

// An engine whose user may not update the bucket's stream opens a bucket
// made with markers all the same, and leaves it as it was.
func TestOpenOfABucketWithMarkersByAUserThatMayNotUpdateItLeavesItAsItWas(t *testing.T) {
	url, stream := natstest.MarkedBucket(t, "MARKED")
	b, err := Open(t.Context(), natstest.Connect(t, url, nats.UserInfo("engine", "engine")), Config{Bucket: "MARKED"}, "test")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if _, err := b.Put(t.Context(), Encode("k"), []byte("v"), 0, nil); err != nil {
		t.Fatalf("Put: %v", err)
	}
	info, err := stream.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if ttl := info.Config.SubjectDeleteMarkerTTL; ttl != time.Minute {
		t.Fatalf("markers of expiry for %v after a refused update, want the minute it was made with", ttl)
	}
}

// The operator hears of a bucket left with its markers, which can delete
// writes, on the logger the bucket was opened with: the warning names the
// permission, and carries the logger's attributes, such as the engine's
// instance id. Before, it went to slog.Default(), without them.
func TestTheWarningOfABucketLeftWithItsMarkersGoesToTheLoggerItWasOpenedWith(t *testing.T) {
	url, _ := natstest.MarkedBucket(t, "MARKED")
	log, logs := logbuf.Logger(slog.LevelInfo)
	c := Config{Bucket: "MARKED", Logger: log.With("instance", "e1")}
	if _, err := Open(t.Context(), natstest.Connect(t, url, nats.UserInfo("engine", "engine")), c, "test"); err != nil {
		t.Fatalf("Open: %v", err)
	}
	text := logs.String()
	if !strings.Contains(text, "level=WARN") || !strings.Contains(text, "$JS.API.STREAM.UPDATE.KV_MARKED") {
		t.Fatalf("a bucket left with its markers was not warned of on the bucket's logger, naming the permission:\n%s", text)
	}
	for line := range strings.Lines(text) {
		if strings.Contains(line, "level=WARN") && !strings.Contains(line, "instance=e1") {
			t.Fatalf("the warning lacks the logger's attributes: %s", line)
		}
	}
}
