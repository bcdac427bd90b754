package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// natsOnlyConfig writes a configuration whose every service keeps its data
// in JetStream on the engine's own broker: nothing but NATS. The lease is
// long: these handovers are releases, and a short lease could fence an
// engine whose renewal the race detector starves while it moves megabytes.
func natsOnlyConfig(t *testing.T, url string) string {
	t.Helper()
	dir := t.TempDir()
	yaml := fmt.Sprintf(`nats:
  url: %s
  engine: {lease_seconds: 10, drain_seconds: 30}
http: {listen: "127.0.0.1:0"}
data_dir: %s
services:
  keyvalue: {adapter: jetstream, config: {bucket: ABI_KV}}
  document: {adapter: jetstream, config: {bucket: ABI_DOCS}}
  object_storage: {adapter: jetstream, config: {bucket: ABI_OBJECTS}}
  vector_store: {adapter: off}
  cache: {adapter: keyvalue}
  secret: {adapter: env}
`, url, filepath.Join(dir, "data"))
	path := filepath.Join(dir, "engine.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// writes are what callers were told was stored, by service and key. Each
// key is written by one caller only, and a key and an object are written
// once: a write the store acknowledged and lost is never hidden by a later
// write of the same key. A document is written again and again, and each
// write reads first what its caller last wrote.
type writes struct {
	mu     sync.Mutex
	acked  map[string]string
	failed []string
	calls  atomic.Int64
}

func (w *writes) record(what string, err error) {
	w.calls.Add(1)
	if err != nil {
		w.mu.Lock()
		w.failed = append(w.failed, fmt.Sprintf("%s %s: %v", time.Now().Format("15:04:05.000"), what, err))
		w.mu.Unlock()
	}
}

func (w *writes) ack(key, val string) {
	w.mu.Lock()
	w.acked[key] = val
	w.mu.Unlock()
}

// last is the value key was last acknowledged with.
func (w *writes) last(key string) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	val, ok := w.acked[key]
	return val, ok
}

// A deploy on NATS alone: v1 serves, v2 stands by, and v1 is told to stop
// while callers write and read keys, documents and objects without pause
// and an upload is halfway. No call fails, every acknowledged write reads
// back from v2 (see writes), and the upload completes.
func TestADeployOnNATSAloneLosesNoCallAndNoWrite(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	config := natsOnlyConfig(t, url)
	old := startEngine(t, config, "ABI_ROLLOUT_ID=v1")
	old.waitLog(t, "state=serving")
	next := startEngine(t, config, "ABI_ROLLOUT_ID=v2")
	next.waitLog(t, "state=standby")

	w := &writes{acked: map[string]string{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	loop := func(name string, step func(ctx context.Context, n int) (key, val string, err error)) {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				key, val, err := step(ctx, n)
				cancel()
				w.record(name+" "+key, err)
				if err == nil {
					w.ack(key, val)
				}
			}
		})
	}
	for i := range 2 {
		kv := natsclient.NewKeyValue(natsclient.New(natstest.Connect(t, url)))
		loop("keyvalue", func(ctx context.Context, n int) (string, string, error) {
			key, val := fmt.Sprintf("kv/%d/%d", i, n), fmt.Sprint(n)
			if err := kv.Set(ctx, key, []byte(val), 0); err != nil {
				return key, val, err
			}
			got, err := kv.Get(ctx, key)
			if err == nil && string(got) != val {
				err = fmt.Errorf("read %q after writing %q", got, val)
			}
			return key, val, err
		})
	}
	docs := natsclient.NewDocument(natsclient.New(natstest.Connect(t, url)))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := docs.EnsureCollection(ctx, "orders"); err != nil {
		t.Fatalf("EnsureCollection: %v", err)
	}
	loop("document", func(ctx context.Context, n int) (string, string, error) {
		id, val := fmt.Sprintf("o%d", n%40), fmt.Sprint(n)
		cur, err := docs.Get(ctx, "orders", id)
		version := uint64(0)
		if err == nil {
			version = cur.Version
		} else if !errors.Is(err, ports.ErrNotFound) {
			return "doc/" + id, val, err
		}
		if last, ok := w.last("doc/" + id); ok && (err != nil || fmt.Sprint(cur.Data["n"]) != last) {
			return "doc/" + id, val, fmt.Errorf("read %v, %v where the write acknowledged last was %s", cur.Data["n"], err, last)
		}
		// Only this caller writes these documents: a conflict would be a
		// write the store lost or invented.
		if _, err := docs.Put(ctx, "orders", id, map[string]any{"n": val}, ports.IfVersion(version)); err != nil {
			return "doc/" + id, val, err
		}
		return "doc/" + id, val, nil
	})
	objects := natsclient.NewObjectStorage(natsclient.New(natstest.Connect(t, url)))
	loop("object", func(ctx context.Context, n int) (string, string, error) {
		key, val := fmt.Sprintf("obj/%d", n), fmt.Sprint(n)
		if _, err := objects.Put(ctx, key, strings.NewReader(val), ports.PutObjectOptions{ContentType: "text/plain"}); err != nil {
			return key, val, err
		}
		return key, val, nil
	})

	big := make([]byte, 3<<20)
	_, _ = rand.Read(big)
	r := &slowReader{data: big}
	put := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		_, err := objects.Put(ctx, "big", r, ports.PutObjectOptions{ContentType: "application/octet-stream"})
		put <- err
	}()
	waitUntil(t, "a third of the upload", func() bool { return r.given.Load() > 1<<20 })

	if err := old.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	next.waitLog(t, "standby took over the lease")
	if err := <-put; err != nil {
		t.Fatalf("the upload in progress at shutdown failed: %v\n%s", err, old.output())
	}
	if code := old.exitCode(t); code != 0 {
		t.Fatalf("old engine exit code %d:\n%s", code, old.output())
	}
	time.Sleep(time.Second) // traffic on the new engine alone
	close(stop)
	wg.Wait()

	if len(w.failed) > 0 {
		t.Fatalf("%d of %d calls failed across the deploy, first: %s", len(w.failed), w.calls.Load(), w.failed[0])
	}
	if w.calls.Load() < 100 {
		t.Fatalf("only %d calls made: the traffic did not run", w.calls.Load())
	}
	kv := natsclient.NewKeyValue(natsclient.New(natstest.Connect(t, url)))
	for key, val := range w.acked {
		var got string
		var err error
		switch {
		case strings.HasPrefix(key, "kv/"):
			var b []byte
			b, err = kv.Get(ctx, key)
			got = string(b)
		case strings.HasPrefix(key, "doc/"):
			var d ports.Document
			d, err = docs.Get(ctx, "orders", strings.TrimPrefix(key, "doc/"))
			got = fmt.Sprint(d.Data["n"])
		default:
			var rc io.ReadCloser
			rc, _, err = objects.Get(ctx, key, ports.GetObjectOptions{})
			if err == nil {
				b, rerr := io.ReadAll(rc)
				_ = rc.Close()
				got, err = string(b), rerr
			}
		}
		if err != nil || got != val {
			t.Errorf("acknowledged write %s=%s reads %q, %v from the new engine", key, val, got, err)
		}
	}
	rc, info, err := objects.Get(ctx, "big", ports.GetObjectOptions{})
	if err != nil {
		t.Fatalf("read the upload back from the new engine: %v", err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil || !bytes.Equal(got, big) || info.Size != int64(len(big)) {
		t.Fatalf("read back %d bytes (size %d), err %v; want the %d bytes written", len(got), info.Size, err, len(big))
	}
	t.Logf("%d calls, %d distinct writes checked", w.calls.Load(), len(w.acked))
}
