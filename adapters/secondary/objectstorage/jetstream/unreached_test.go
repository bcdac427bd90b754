package jetstream_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/secondary/objectstorage/jetstream"
	"github.com/abi-engine/engine/internal/logbuf"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/tcpproxy"
	"github.com/abi-engine/engine/ports"
)

// A store told of a term as it begins, with no hold, while the broker is
// out of its reach, holds no one up: HoldRaise returns, the store logs
// that its fence is not raised yet, and tries again until the broker
// answers; the fence then reaches the term, though the term writes
// nothing, and the older term's late Put is refused. Before, a raise that
// failed was told only if the store closed before one succeeded, and
// until then nothing said the older term's writes were not refused.
func TestARaiseOfTheFenceThatFailsIsLoggedAndTriedAgainUntilTheBrokerAnswers(t *testing.T) {
	url := natstest.StartProcess(t, server)
	const bucket = "UNREACHED"
	proxy := tcpproxy.Start(t, strings.TrimPrefix(url, "nats://"))
	away := make(chan struct{}, 1)
	nc := natstest.Connect(t, "nats://"+proxy.Addr(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.DisconnectErrHandler(func(*nats.Conn, error) {
			select {
			case away <- struct{}{}:
			default:
			}
		}))
	log, logs := logbuf.Logger(slog.LevelWarn)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := jetstream.Open(ctx, jetstream.Config{Bucket: bucket, Replicas: 1, Logger: log}, nc)
	if err != nil {
		t.Fatalf("Open bucket %s behind the proxy: %v", bucket, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	paused := open(t, url, jetstream.Config{Bucket: bucket, Replicas: 1})
	older := ports.WithFencingToken(t.Context(), 5)
	start := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	frozen := clockFunc(func() time.Time { return start })

	if _, err := paused.Put(older, "o", bytes.NewReader([]byte("before the takeover")), ports.PutObjectOptions{}); err != nil {
		t.Fatalf("Put of the older term before the takeover: %v", err)
	}
	proxy.Down()
	select {
	case <-away:
	case <-time.After(30 * time.Second):
		t.Fatal("the store's connection did not see the broker go")
	}
	s.HoldRaise(6, start, frozen)
	const said = "cannot raise its fence to its term yet"
	for deadline := time.Now().Add(2 * time.Minute); !strings.Contains(logs.String(), said); {
		if time.Now().After(deadline) {
			t.Fatalf("two minutes after a raise with the broker out of reach, the store's log holds no %q: %s", said, logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	proxy.Up()
	awaitFence(t, url, bucket, 6, nil, frozen)
	if _, err := paused.Put(older, "o", bytes.NewReader([]byte("late")), ports.PutObjectOptions{}); !errors.Is(err, ports.ErrFenced) {
		t.Fatalf("Put of the older term once the newer term's store reached the broker again: %v, want ErrFenced", err)
	}
}
