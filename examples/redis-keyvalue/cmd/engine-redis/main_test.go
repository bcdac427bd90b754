package main_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/redis/go-redis/v9"

	"github.com/abi-engine/engine/contracttests/backendtest"
)

// build compiles this command, the team's own engine, for the test.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "engine-redis")
	out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startNATS runs a JetStream broker in the test's process.
func startNATS(t *testing.T) string {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatalf("nats-server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatalf("nats-server not ready in 10s")
	}
	t.Cleanup(s.Shutdown)
	return s.ClientURL()
}

// environ is the test's environment without the variables that choose a
// role, a rollout or a broker, plus env.
func environ(env ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); name != "ABI_ENGINE_ROLE" && name != "ABI_ROLLOUT_ID" && name != "NATS_URL" {
			out = append(out, kv)
		}
	}
	return append(out, env...)
}

// An engine built with the public entry point serves the keyvalue service
// from Redis: it passes the shared-backend check of a rollout, and a
// client command's kv set and kv get go through NATS to it and land in
// Redis under the configured prefix.
func TestTheCustomEngineServesKeyValueFromRedis(t *testing.T) {
	addr := backendtest.Lookup(t, "ENGINE_TEST_REDIS_ADDR", "Redis", false)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := backendtest.Namespace(t, "engine", func(ctx context.Context, ns string) error {
		keys, err := rdb.Keys(ctx, ns+"*").Result()
		if err != nil || len(keys) == 0 {
			return err
		}
		return rdb.Del(ctx, keys...).Err()
	}) + ":"
	bin := build(t)
	dir := t.TempDir()
	config := filepath.Join(dir, "engine.yaml")
	// Every service either on Redis (the cache tier keeps its entries in
	// the keyvalue service) or off, so a rollout may hand them over.
	yaml := fmt.Sprintf(`nats:
  url: %s
  engine: {lease_seconds: 2, drain_seconds: 1}
services:
  keyvalue: {adapter: redis, config: {addr: %q, prefix: %q, password: "${TEST_REDIS_PASSWORD}"}}
  cache: {adapter: keyvalue}
  document: {adapter: off}
  object_storage: {adapter: off}
  vector_store: {adapter: off}
http: {listen: "127.0.0.1:0"}
data_dir: %s
`, startNATS(t), addr, prefix, filepath.Join(dir, "data"))
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	password := "TEST_REDIS_PASSWORD="
	run := func(args ...string) (string, string, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append(args, "--config", config)...)
		cmd.Env = environ("ABI_ROLLOUT_ID=r1", password)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		_ = cmd.Run()
		return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
	}

	// config check opens nothing, so a password the server would refuse
	// shows only how it is masked.
	password = "TEST_REDIS_PASSWORD=hunter2"
	out, errOut, code := run("config", "check")
	if code != 0 || !strings.Contains(out, "keyvalue (redis): shared: every engine reaches it") ||
		!strings.Contains(out, "cache (keyvalue): shared") {
		t.Fatalf("config check with rollout r1 = %d\n%s%s", code, out, errOut)
	}
	if strings.Contains(out, "hunter2") || !strings.Contains(out, "password: '***'") {
		t.Fatalf("config check does not mask the Redis password:\n%s", out)
	}
	password = "TEST_REDIS_PASSWORD="

	serving := exec.Command(bin, "serve", "--config", config)
	serving.Env = environ("ABI_ROLLOUT_ID=r1", "TEST_REDIS_PASSWORD=")
	logs, err := serving.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := serving.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	ready := make(chan struct{})
	var logText bytes.Buffer
	go func() {
		signal := ready // closed once, on the first serving line
		sc := bufio.NewScanner(logs)
		for sc.Scan() {
			logText.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "state=serving") && signal != nil {
				close(signal)
				signal = nil
			}
		}
		exited <- serving.Wait()
	}()
	t.Cleanup(func() {
		if serving.ProcessState == nil {
			_ = serving.Process.Kill()
			<-exited
		}
	})
	select {
	case <-ready:
	case err := <-exited:
		t.Fatalf("the engine exited before serving: %v\n%s", err, logText.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("the engine did not serve in 60s")
	}

	if out, errOut, code := run("kv", "set", "greeting", "hello from redis"); code != 0 {
		t.Fatalf("kv set = %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := run("kv", "get", "greeting"); code != 0 || out != "hello from redis" {
		t.Fatalf("kv get = %d, %q\n%s", code, out, errOut)
	}
	if v, err := rdb.Get(t.Context(), prefix+"v:greeting").Result(); err != nil || v != "hello from redis" {
		t.Fatalf("Redis holds %q, %v under %sv:greeting", v, err, prefix)
	}

	if err := serving.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the engine stopped with %v\n%s", err, logText.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the engine did not stop in 60s")
	}
}
