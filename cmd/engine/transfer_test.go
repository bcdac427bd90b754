package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/pgtest"
	"github.com/abi-engine/engine/internal/testenv"
	"github.com/abi-engine/engine/ports"
)

// objectsConfig writes a configuration whose objects live in a fresh bucket
// of the test S3 server and keys in PostgreSQL: shared, so rollouts may
// hand over. The lease is long: these handovers are releases, and a lease
// of one second could fence an engine whose renewal the race detector
// starves while it moves megabytes.
func objectsConfig(t *testing.T, url string, drainSeconds int) string {
	t.Helper()
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	endpoint := testenv.Lookup(t, "ENGINE_TEST_S3_ENDPOINT", "S3 server", false)
	access := testenv.Lookup(t, "ENGINE_TEST_S3_ACCESS_KEY", "S3 access key", false)
	secret := testenv.Lookup(t, "ENGINE_TEST_S3_SECRET_KEY", "S3 secret key", false)
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	bucket := "engine-transfer-" + hex.EncodeToString(suffix)
	client := s3.New(s3.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(access, secret, ""),
	})
	if _, err := client.CreateBucket(t.Context(), &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatalf("create bucket %s: %v", bucket, err)
	}
	dir := t.TempDir()
	yaml := fmt.Sprintf(`nats:
  url: %s
  engine: {lease_seconds: 10, drain_seconds: %d}
http: {listen: "127.0.0.1:0"}
data_dir: %s
services:
  keyvalue: {adapter: postgres, config: {dsn: %q, table: %s}}
  document: {adapter: off}
  object_storage: {adapter: s3, config: {endpoint: %q, bucket: %s, region: us-east-1, access_key: %q, secret_key: %q, path_style: true}}
  vector_store: {adapter: off}
  cache: {adapter: off}
  secret: {adapter: env}
`, url, drainSeconds, filepath.Join(dir, "data"), dsn, pgtest.Table(t, dsn, "objects"), endpoint, bucket, access, secret)
	path := filepath.Join(dir, "engine.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// slowReader yields data in small pieces with a pause between them, and
// counts what it gave; with hold set it stops giving after that many bytes
// until released.
type slowReader struct {
	data    []byte
	off     int
	given   atomic.Int64
	hold    int
	release chan struct{}
}

func (r *slowReader) Read(p []byte) (int, error) {
	if r.off >= len(r.data) {
		return 0, io.EOF
	}
	if r.hold > 0 && r.off >= r.hold {
		<-r.release
		return 0, io.ErrUnexpectedEOF
	}
	time.Sleep(10 * time.Millisecond)
	n := copy(p[:min(len(p), 32<<10)], r.data[r.off:])
	r.off += n
	r.given.Add(int64(n))
	return n, nil
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen in 30s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestATransferInProgressAtShutdownCompletesWhileNewOnesGoToTheNextEngine(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	config := objectsConfig(t, url, 30)
	old := startEngine(t, config, "ABI_ROLLOUT_ID=v1")
	old.waitLog(t, "state=serving")
	next := startEngine(t, config, "ABI_ROLLOUT_ID=v2")
	next.waitLog(t, "state=standby")
	objects := natsclient.NewObjectStorage(natsclient.New(natstest.Connect(t, url)))

	big := make([]byte, 3<<20)
	_, _ = rand.Read(big)
	r := &slowReader{data: big}
	put := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_, err := objects.Put(ctx, "big", r, ports.PutObjectOptions{ContentType: "application/octet-stream"})
		put <- err
	}()
	waitUntil(t, "a third of the upload", func() bool { return r.given.Load() > 1<<20 })

	if err := old.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	next.waitLog(t, "standby took over the lease")
	// The old engine still drains the big upload; a new transfer can only
	// reach the engine that now accepts calls.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := objects.Put(ctx, "small", strings.NewReader("hello"), ports.PutObjectOptions{}); err != nil {
		t.Fatalf("a new transfer during the handover: %v", err)
	}
	select {
	case <-old.done:
		t.Fatalf("the old engine exited before its transfer finished:\n%s", old.output())
	default:
	}
	if err := <-put; err != nil {
		t.Fatalf("the transfer in progress at shutdown failed: %v\n%s", err, old.output())
	}
	if code := old.exitCode(t); code != 0 {
		t.Fatalf("old engine exit code %d:\n%s", code, old.output())
	}
	rc, info, err := objects.Get(ctx, "big", ports.GetObjectOptions{})
	if err != nil {
		t.Fatalf("read the object back from the new engine: %v", err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil || !bytes.Equal(got, big) || info.Size != int64(len(big)) {
		t.Fatalf("read back %d bytes (size %d), err %v; want the %d bytes written", len(got), info.Size, err, len(big))
	}
}

func TestAStuckTransferIsClosedAtTheDrainDeadline(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	e := startEngine(t, objectsConfig(t, url, 1))
	e.waitLog(t, "state=serving")
	objects := natsclient.NewObjectStorage(natsclient.New(natstest.Connect(t, url)))
	data := make([]byte, 1<<20)
	r := &slowReader{data: data, hold: 256 << 10, release: make(chan struct{})}
	put := make(chan error, 1)
	go func() {
		_, err := objects.Put(context.Background(), "stuck", r, ports.PutObjectOptions{})
		put <- err
	}()
	waitUntil(t, "the upload stalls", func() bool { return r.given.Load() >= 256<<10 })
	signalled := time.Now()
	if err := e.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := e.exitCode(t); code != 0 {
		t.Fatalf("exit code %d:\n%s", code, e.output())
	}
	if took := time.Since(signalled); took < time.Second {
		t.Fatalf("the engine stopped %v after SIGTERM, before its drain deadline of 1s", took)
	}
	if !strings.Contains(e.output(), "drain deadline passed") {
		t.Fatalf("the engine does not say it cut the drain short:\n%s", e.output())
	}
	close(r.release)
	select {
	case err := <-put:
		if err == nil {
			t.Fatalf("a transfer closed at the drain deadline reported success")
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the stuck transfer's caller never heard back")
	}
}

// An operator who signals an engine again while it drains wants it gone
// now, not after drain_seconds: the second signal ends the process at once,
// with exit code 1, while the lease it released on the first stays
// released for the next engine. Before, the second signal was ignored and
// the engine waited out the whole drain.
func TestASecondSignalWhileDrainingEndsTheEngineAtOnce(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	e := startEngine(t, objectsConfig(t, url, 300))
	e.waitLog(t, "state=serving")
	objects := natsclient.NewObjectStorage(natsclient.New(natstest.Connect(t, url)))
	r := &slowReader{data: make([]byte, 1<<20), hold: 256 << 10, release: make(chan struct{})}
	defer close(r.release)
	go func() { _, _ = objects.Put(context.Background(), "stuck", r, ports.PutObjectOptions{}) }()
	waitUntil(t, "the upload stalls", func() bool { return r.given.Load() >= 256<<10 })

	if err := e.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The drain of the stalled upload has begun once the lease is released.
	e.waitLog(t, "lease released")
	if err := e.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the engine still drains 30s after a second signal (drain_seconds 300):\n%s", e.output())
	}
	if code := e.cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("exit code %d after a second signal, want 1:\n%s", code, e.output())
	}
	if rec := readLease(t, url); !rec.Holder.Released || rec.Holder.PID != e.cmd.Process.Pid {
		t.Fatalf("after the forced exit the lease reads %+v, want the engine's released record", rec)
	}
}
