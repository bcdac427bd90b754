//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// An engine paused between admitting a write and performing it, while a
// standby takes over and writes the same key, is refused by the store when
// it resumes: the write carries the fencing token of its old term, and the
// store has seen the newer one. The stored value stays the new engine's.
// Without the token, the resumed write would overwrite it. On PostgreSQL
// the standby is the next release of a deploy; on SQLite, a hot standby of
// the same release on the same host, whose stores are the same files (the
// SQLite case failed before the file had a fence).
func TestAWritePausedAcrossATakeoverIsRefusedByTheStore(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		url := natstest.StartServer(t).ClientURL()
		pausedWriteAcrossATakeover(t, url, sharedConfig(t, url, ""), []string{"ABI_ROLLOUT_ID=v1"}, []string{"ABI_ROLLOUT_ID=v2"})
	})
	t.Run("sqlite", func(t *testing.T) {
		url := natstest.StartServer(t).ClientURL()
		pausedWriteAcrossATakeover(t, url, hotStandbyConfig(t, url), nil, nil)
	})
}

// An engine paused (SIGSTOP) past its lease, after it served a key many
// times, answers none of the reads that reached it while it was paused with
// the value of its old term once it resumes: a standby took over and wrote
// the key meanwhile, and every answer is the new value or a refusal.
func TestAPausedEngineAnswersNoReadWithAValueOfItsOldTerm(t *testing.T) {
	s := natstest.StartServer(t)
	url := s.ClientURL()
	config := sharedConfig(t, url, "")
	old := startEngine(t, config, "ABI_ROLLOUT_ID=v1")
	old.waitLog(t, "state=serving")
	next := startEngine(t, config, "ABI_ROLLOUT_ID=v2")
	next.waitLog(t, "state=standby")

	kv := natsclient.NewKeyValue(natsclient.New(natstest.Connect(t, url)))
	if err := kv.Set(t.Context(), "k", []byte("old"), 0); err != nil {
		t.Fatal(err)
	}
	for range 5 { // whatever the old engine keeps of a value it serves, it keeps this one
		if v, err := kv.Get(t.Context(), "k"); err != nil || string(v) != "old" {
			t.Fatalf("get: %q %v", v, err)
		}
	}
	// Only the serving engine accepts calls, so this is the old one's.
	oldAccept := acceptingConnection(t, s)
	pid := old.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	next.waitLog(t, "standby took over the lease")
	setThroughTheNewEngine(t, kv, "k", "new")

	// Reads the broker routes to the paused engine wait in its socket.
	nc := natstest.Connect(t, url)
	body, _ := json.Marshal(wire.KVKey{Key: "k"})
	var mu sync.Mutex
	answers := map[string]int{}
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			m, err := nc.Request(wire.Subject(ports.ServiceKeyValue, wire.KVGet), body, 20*time.Second)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				answers["error "+err.Error()]++
			case m.Header.Get(wire.ErrorCodeHeader) != "":
				answers["code "+m.Header.Get(wire.ErrorCodeHeader)]++
			default:
				var v wire.KVValue
				_ = json.Unmarshal(m.Data, &v)
				answers["value "+string(v.Value)]++
			}
		})
	}
	waitDelivered(t, s, oldAccept.Cid, oldAccept.OutMsgs+1)
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if answers["value old"] > 0 {
		t.Fatalf("a resumed engine answered the value of its old term: %v", answers)
	}
	t.Logf("answers: %v", answers)
}

// acceptingConnection is the broker's view of the one engine connection
// that accepts calls.
func acceptingConnection(t *testing.T, s *server.Server) *server.ConnInfo {
	t.Helper()
	connz, err := s.Connz(&server.ConnzOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var found *server.ConnInfo
	for _, c := range connz.Conns {
		if strings.HasPrefix(c.Name, "abi-engine accept") {
			if found != nil {
				t.Fatalf("two accepting connections: %q and %q", found.Name, c.Name)
			}
			found = c
		}
	}
	if found == nil {
		t.Fatalf("no accepting connection among %d", len(connz.Conns))
	}
	return found
}

// waitDelivered waits until the broker has sent connection cid at least n
// messages in all.
func waitDelivered(t *testing.T, s *server.Server, cid uint64, n int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		connz, err := s.Connz(&server.ConnzOptions{CID: cid})
		if err != nil {
			t.Fatal(err)
		}
		if len(connz.Conns) == 1 && connz.Conns[0].OutMsgs >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the broker sent connection %d fewer than %d messages in 30s", cid, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// hotStandbyConfig is the embedded defaults (SQLite and files under one
// data directory) with a hot standby: engines started with it share every
// store.
func hotStandbyConfig(t *testing.T, url string) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "engine.yaml")
	yaml := fmt.Sprintf("nats:\n  url: %s\n  engine: {lease_seconds: 1, drain_seconds: 1, hot_standby: true}\nhttp:\n  listen: 127.0.0.1:0\ndata_dir: %s\n", url, filepath.Join(dir, "data"))
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func pausedWriteAcrossATakeover(t *testing.T, url, config string, oldEnv, nextEnv []string) {
	old := startEngine(t, config, append(oldEnv, "ABI_ENGINE_TEST_STOP_BEFORE_SET=contested")...)
	old.waitLog(t, "state=serving")
	next := startEngine(t, config, nextEnv...)
	next.waitLog(t, "state=standby")

	// The old engine admits this set, then stops itself before the store.
	paused := admitThenPause(t, url, old, wire.Subject(ports.ServiceKeyValue, wire.KVSet),
		wire.KVWrite{Key: "contested", Value: wire.Bytes("from the old term")}, 60*time.Second)

	// A lease of silence later the standby serves, and writes the key.
	next.waitLog(t, "standby took over the lease")
	kv := natsclient.NewKeyValue(natsclient.New(natstest.Connect(t, url)))
	setThroughTheNewEngine(t, kv, "contested", "from the new term")

	answer := paused.resume(t, "write")
	got, err := kv.Get(t.Context(), "contested")
	if err != nil || string(got) != "from the new term" {
		t.Fatalf("the key holds %q (%v), want the new engine's value", got, err)
	}
	paused.wantFenced(t, answer, "write")
}

// pausedCall is a call an engine admitted and then stopped itself on,
// before the store, by its ABI_ENGINE_TEST_STOP_BEFORE_* hook.
type pausedCall struct {
	engine *process
	answer chan *nats.Msg
	err    chan error
}

// admitThenPause sends request to subject, which the serving engine old
// admits and then stops itself on, and waits until old is stopped. Old is
// let go on at the test's end whatever the test did, so that the process
// can be killed and reaped.
func admitThenPause(t *testing.T, url string, old *process, subject string, request any, timeout time.Duration) *pausedCall {
	t.Helper()
	nc := natstest.Connect(t, url)
	body, err := json.Marshal(request)
	if err != nil {
		t.Fatal(err)
	}
	c := &pausedCall{engine: old, answer: make(chan *nats.Msg, 1), err: make(chan error, 1)}
	go func() {
		m, err := nc.Request(subject, body, timeout)
		c.answer <- m
		c.err <- err
	}()
	pid := old.cmd.Process.Pid
	waitStopped(t, pid)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	return c
}

// resume lets the paused engine go on and returns the error its answer to
// the call carries; the call must be answered, and refused. What names the
// call in failures.
func (c *pausedCall) resume(t *testing.T, what string) error {
	t.Helper()
	if err := syscall.Kill(c.engine.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	m, err := <-c.answer, <-c.err
	if err != nil {
		t.Fatalf("the paused %s got no answer: %v", what, err)
	}
	answer := wire.ErrorFromHeaders(m.Header.Get(wire.ErrorCodeHeader), m.Header.Get(wire.ErrorHeader))
	if answer == nil {
		t.Fatalf("the paused %s of the old term succeeded after the takeover", what)
	}
	return answer
}

// wantFenced holds that the paused call was refused because its engine was
// fenced, and that the engine then exited as one that lost its lease.
func (c *pausedCall) wantFenced(t *testing.T, answer error, what string) {
	t.Helper()
	if !errors.Is(answer, wire.ErrUnavailable) || !strings.Contains(answer.Error(), "fenced") {
		t.Fatalf("the paused %s was answered %v, want 503 saying the engine was fenced", what, answer)
	}
	if code := c.engine.exitCode(t); code == 0 {
		t.Fatalf("the old engine exited 0 after losing its lease")
	}
}

// waitStopped waits until the process is stopped by a signal.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err == nil {
			// The state follows the command name in parentheses.
			if i := strings.LastIndexByte(string(b), ')'); i > 0 && strings.HasPrefix(string(b[i+1:]), " T") {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("process %d did not stop in 30s", pid)
}

// setThroughTheNewEngine sets key until an engine answers: calls the broker
// routes to the stopped engine wait for it, so each try is short.
func setThroughTheNewEngine(t *testing.T, kv natsclient.KeyValue, key, value string) {
	t.Helper()
	var err error
	for range 30 {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		err = kv.Set(ctx, key, []byte(value), 0)
		cancel()
		if err == nil {
			return
		}
	}
	t.Fatalf("no engine answered a set of %q: %v", key, err)
}

// An engine of a deploy on NATS alone, paused (SIGSTOP) between admitting
// the delete of an object and performing it, past its lease, while a
// standby takes over after that silence and puts the object anew, has its
// delete refused by the JetStream object store when it resumes: the
// successor took over from a silent holder, not from a release, so its
// first write raised the store's fence at once (ADR 0023). The object
// stays the successor's. A successor that held the raise back as after a
// release let the paused delete remove it.
func TestAnObjectWriteOfAnEnginePausedAcrossATakeoverIsRefused(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	config := natsOnlyConfig(t, url)
	old := startEngine(t, config, "ABI_ROLLOUT_ID=v1", "ABI_ENGINE_TEST_STOP_BEFORE_OBJECT_DELETE=contested")
	old.waitLog(t, "state=serving")
	next := startEngine(t, config, "ABI_ROLLOUT_ID=v2")
	next.waitLog(t, "state=standby")

	objects := natsclient.NewObjectStorage(natsclient.New(natstest.Connect(t, url)))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := objects.Put(ctx, "contested", strings.NewReader("from the old term"), ports.PutObjectOptions{}); err != nil {
		t.Fatalf("Put through the old engine: %v", err)
	}

	// The old engine admits this delete, then stops itself before the store.
	paused := admitThenPause(t, url, old, wire.Subject(ports.ServiceObjectStorage, wire.OSDelete),
		wire.OSKey{Key: "contested"}, 90*time.Second)

	// A lease of silence later the standby serves, and puts the object.
	next.waitLog(t, "standby took over the lease")
	want := putThroughTheNewEngine(t, objects, "contested", "from the new term")

	answer := paused.resume(t, "delete")
	info, err := objects.Stat(ctx, "contested")
	if err != nil || info.ETag != want.ETag {
		t.Fatalf("the object is %+v (%v), want the new engine's (ETag %s)", info, err, want.ETag)
	}
	paused.wantFenced(t, answer, "delete")
}

// putThroughTheNewEngine puts key until an engine answers: calls the
// broker routes to the stopped engine wait for it, so each try is short.
func putThroughTheNewEngine(t *testing.T, objects natsclient.ObjectStorage, key, value string) ports.ObjectInfo {
	t.Helper()
	var err error
	for range 30 {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		var info ports.ObjectInfo
		info, err = objects.Put(ctx, key, strings.NewReader(value), ports.PutObjectOptions{})
		cancel()
		if err == nil {
			return info
		}
	}
	t.Fatalf("no engine answered a put of %q: %v", key, err)
	return ports.ObjectInfo{}
}
