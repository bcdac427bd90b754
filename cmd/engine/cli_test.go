package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/secondary/lease/jetstream"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/jsonkeys"
	"github.com/abi-engine/engine/internal/natstest"
)

// result is one run of the command.
type result struct {
	stdout, stderr string
	code           int
	pid            int
}

// cli runs the engine binary with args, stdin from in (nil: none), in an
// environment that chooses neither role, rollout nor broker.
func cli(t *testing.T, in io.Reader, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, engineBin, args...)
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); name != "ABI_ENGINE_ROLE" && name != "ABI_ROLLOUT_ID" && name != "NATS_URL" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("engine %q: %v", args, err)
	}
	return result{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode(), pid: cmd.ProcessState.Pid()}
}

// ok runs a command that must succeed without a word on stderr.
func ok(t *testing.T, in io.Reader, args ...string) string {
	t.Helper()
	r := cli(t, in, args...)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("engine %q = %d\nstdout: %s\nstderr: %s", args, r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// failsWith runs a command that must exit with code, saying want on
// stderr and nothing on stdout.
func failsWith(t *testing.T, code int, want string, args ...string) {
	t.Helper()
	r := cli(t, nil, args...)
	if r.code != code || !strings.Contains(r.stderr, want) || r.stdout != "" {
		t.Fatalf("engine %q = %d\nstdout: %s\nstderr: %s\nwant %d and %q on stderr alone", args, r.code, r.stdout, r.stderr, code, want)
	}
}

// decodeOne parses out as exactly one JSON document into v, and checks
// that every key of ours in it is snake_case (a document's data is the
// user's).
func decodeOne(t *testing.T, out string, v any) {
	t.Helper()
	jsonkeys.SnakeCase(t, []byte(out), "data")
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(v); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		t.Fatalf("output holds more than one JSON document:\n%s", out)
	}
}

// exerciseKeyValue runs every kv command against the engine config reaches.
func exerciseKeyValue(t *testing.T, config string) {
	if out := ok(t, nil, "kv", "set", "greeting", "hello", "--config", config); out != "" {
		t.Fatalf("kv set printed %q", out)
	}
	if out := ok(t, nil, "kv", "get", "--config", config, "greeting"); out != "hello" {
		t.Fatalf("kv get = %q, want the value's exact bytes", out)
	}
	var entry struct{ Key, Value string }
	decodeOne(t, ok(t, nil, "kv", "get", "greeting", "--config", config, "--output", "json"), &entry)
	if entry.Key != "greeting" || entry.Value != "hello" {
		t.Fatalf("kv get --output json = %+v", entry)
	}
	ok(t, strings.NewReader("line one\nline two\n"), "kv", "set", "--config", config, "lines")
	if out := ok(t, nil, "kv", "get", "lines", "--config", config); out != "line one\nline two\n" {
		t.Fatalf("a value set from stdin reads back as %q", out)
	}
	ok(t, nil, "kv", "set", "--config", config, "--", "dash", "-1")
	if out := ok(t, nil, "kv", "get", "dash", "--config", config); out != "-1" {
		t.Fatalf("a value after -- reads back as %q", out)
	}
	if out := ok(t, nil, "kv", "ls", "--config", config); out != "dash\ngreeting\nlines\n" {
		t.Fatalf("kv ls = %q", out)
	}
	var list struct{ Keys []string }
	decodeOne(t, ok(t, nil, "kv", "ls", "g", "--config", config, "--output", "json"), &list)
	if len(list.Keys) != 1 || list.Keys[0] != "greeting" {
		t.Fatalf("kv ls g --output json = %+v", list)
	}
	ok(t, nil, "kv", "del", "greeting", "--config", config)
	failsWith(t, 1, `key "greeting" not found`, "kv", "get", "greeting", "--config", config)
	failsWith(t, 1, `key "greeting" not found`, "kv", "del", "greeting", "--config", config)
	failsWith(t, 1, `key "greeting" not found`, "kv", "get", "greeting", "--config", config, "--output", "json")
}

// putVersion is the version a doc put printed ("tickets/t1 version 7").
func putVersion(t *testing.T, out, doc string) string {
	t.Helper()
	v, found := strings.CutPrefix(strings.TrimSuffix(out, "\n"), doc+" version ")
	if _, err := strconv.ParseUint(v, 10, 64); !found || err != nil {
		t.Fatalf("doc put of %s = %q, want %q and a version", doc, out, doc+" version ")
	}
	return v
}

// exerciseDocuments runs every doc command against the engine config reaches.
// Versions are the store's to choose: only that they grow is checked.
func exerciseDocuments(t *testing.T, config string) {
	first := putVersion(t, ok(t, nil, "doc", "put", "tickets", "t1", `{"status":"open"}`, "--config", config), "tickets/t1")
	other := putVersion(t, ok(t, strings.NewReader(`{"status":"closed"}`), "doc", "put", "tickets", "t2", "--config", config), "tickets/t2")
	second := putVersion(t, ok(t, nil, "doc", "put", "tickets", "t1", `{"status":"open","n":2}`, "--if-version", first, "--config", config), "tickets/t1")
	if mustUint(t, second) <= mustUint(t, first) {
		t.Fatalf("a conditional doc put gave version %s after %s", second, first)
	}
	failsWith(t, 1, "not at version "+first, "doc", "put", "tickets", "t1", `{}`, "--if-version", first, "--config", config)

	out := ok(t, nil, "doc", "get", "tickets", "t1", "--config", config)
	if !strings.HasPrefix(out, "# tickets/t1 version "+second+"\n") || !strings.Contains(out, `"status": "open"`) {
		t.Fatalf("doc get = %q", out)
	}
	var d struct {
		Collection, ID string
		Version        uint64
		Data           map[string]any
	}
	decodeOne(t, ok(t, nil, "doc", "get", "tickets", "t1", "--config", config, "--output", "json"), &d)
	if d.Collection != "tickets" || d.ID != "t1" || d.Version != mustUint(t, second) || d.Data["status"] != "open" {
		t.Fatalf("doc get --output json = %+v", d)
	}

	var found struct {
		Documents []struct {
			ID   string
			Data map[string]any
		}
	}
	decodeOne(t, ok(t, nil, "doc", "find", "tickets", "--where", `{"status":"closed"}`, "--config", config, "--output", "json"), &found)
	if len(found.Documents) != 1 || found.Documents[0].ID != "t2" {
		t.Fatalf("doc find --where closed = %+v", found)
	}
	if out := ok(t, nil, "doc", "find", "tickets", "--desc", "--config", config); !strings.HasPrefix(out, "t2\tversion "+other+"\t") || !strings.Contains(out, "\nt1\tversion "+second+"\t") {
		t.Fatalf("doc find --desc = %q", out)
	}

	ok(t, nil, "doc", "del", "tickets", "t1", "--config", config)
	failsWith(t, 1, `document "t1" not found in collection "tickets"`, "doc", "get", "tickets", "t1", "--config", config)
	failsWith(t, 1, `document "t1" not found in collection "tickets"`, "doc", "del", "tickets", "t1", "--config", config)
	failsWith(t, 1, `collection "nothing" not found`, "doc", "find", "nothing", "--config", config)
}

func mustUint(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// exerciseObjects runs every obj command against the engine config reaches,
// with an object of 3 MiB: several chunks, and a size that would show a bar
// on a terminal.
func exerciseObjects(t *testing.T, config string) {
	big := make([]byte, 3<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "big.bin")
	if err := os.WriteFile(src, big, 0o600); err != nil {
		t.Fatal(err)
	}
	out := ok(t, nil, "obj", "put", "data/big.bin", src, "--config", config)
	if !strings.HasPrefix(out, "data/big.bin: 3145728 bytes, etag ") {
		t.Fatalf("obj put = %q", out)
	}
	dst := filepath.Join(dir, "copy.bin")
	ok(t, nil, "obj", "get", "data/big.bin", dst, "--config", config)
	if got, err := os.ReadFile(dst); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("the object read back into a file differs from the file put (%d of %d bytes, %v)", len(got), len(big), err)
	}
	if got := ok(t, nil, "obj", "get", "data/big.bin", "--config", config); got != string(big) {
		t.Fatalf("the object read back on stdout differs from the file put (%d of %d bytes)", len(got), len(big))
	}

	ok(t, strings.NewReader("small object"), "obj", "put", "data/small.txt", "-", "--content-type", "text/plain", "--config", config)
	if got := ok(t, nil, "obj", "get", "data/small.txt", "-", "--config", config); got != "small object" {
		t.Fatalf("an object put from stdin reads back as %q", got)
	}
	var list struct {
		Objects []struct {
			Key         string
			Size        int64
			ContentType string `json:"content_type"`
		}
	}
	decodeOne(t, ok(t, nil, "obj", "ls", "data/", "--config", config, "--output", "json"), &list)
	if len(list.Objects) != 2 || list.Objects[0].Key != "data/big.bin" || list.Objects[0].Size != 3<<20 ||
		list.Objects[1].Key != "data/small.txt" || list.Objects[1].Size != 12 {
		t.Fatalf("obj ls --output json = %+v", list)
	}
	if out := ok(t, nil, "obj", "ls", "--config", config); !strings.Contains(out, "     3145728  ") || !strings.HasSuffix(out, "Z  data/small.txt\n") {
		t.Fatalf("obj ls = %q", out)
	}

	ok(t, nil, "obj", "rm", "data/small.txt", "--config", config)
	failsWith(t, 1, `object "data/small.txt" not found`, "obj", "get", "data/small.txt", "--config", config)
	failsWith(t, 1, `object "data/small.txt" not found`, "obj", "rm", "data/small.txt", "--config", config)
	if _, err := os.Stat(filepath.Join(dir, "none.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("test file exists before the test")
	}
	failsWith(t, 1, `object "data/small.txt" not found`, "obj", "get", "data/small.txt", filepath.Join(dir, "none.bin"), "--config", config)
	if _, err := os.Stat(filepath.Join(dir, "none.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("obj get of a missing object created its file")
	}
}

func TestCommandsNextToAServingEngineAreItsClients(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	config := writeConfigLease(t, url, 10)
	e := startEngine(t, config)
	e.waitLog(t, "state=serving")
	holder := readLease(t, url).Holder

	t.Run("Status", func(t *testing.T) {
		out := ok(t, nil, "status", "--config", config)
		for _, want := range []string{"engine " + holder.InstanceID + " serves", "host:        " + holder.Host, "revision:", "last write:"} {
			if !strings.Contains(out, want) {
				t.Errorf("status does not say %q:\n%s", want, out)
			}
		}
		var st struct {
			Serving bool
			Holder  struct {
				InstanceID string `json:"instance_id"`
				PID        int
			}
			Revision   uint64
			SinceWrite float64 `json:"since_write_seconds"`
		}
		decodeOne(t, ok(t, nil, "status", "--output", "json", "--nats-url", url), &st)
		if !st.Serving || st.Holder.InstanceID != holder.InstanceID || st.Holder.PID != e.cmd.Process.Pid || st.Revision == 0 {
			t.Fatalf("status --output json = %+v, want the engine %s", st, holder.InstanceID)
		}
	})
	t.Run("KeyValue", func(t *testing.T) {
		exerciseKeyValue(t, config)
		// What the commands wrote is the serving engine's.
		ok(t, nil, "kv", "set", "shared", "yes", "--config", config)
		kv := natsclient.NewKeyValue(natsclient.New(natstest.Connect(t, url)))
		if v, err := kv.Get(t.Context(), "shared"); err != nil || string(v) != "yes" {
			t.Fatalf("the engine reads %q, %v", v, err)
		}
	})
	t.Run("Documents", func(t *testing.T) { exerciseDocuments(t, config) })
	t.Run("Objects", func(t *testing.T) { exerciseObjects(t, config) })
	t.Run("AClientOpensNothing", func(t *testing.T) {
		dir := t.TempDir()
		ok(t, nil, "kv", "get", "shared", "--config", config, "--data-dir", dir)
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Fatalf("a command next to a serving engine wrote %d entries in its data dir", len(entries))
		}
		if rec := readLease(t, url); rec.Holder.InstanceID != holder.InstanceID || rec.Holder.Released {
			t.Fatalf("after the commands the lease reads %+v, want the engine's", rec)
		}
	})
}

func TestCommandsOnTheirOwnServeForTheirLength(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	config := writeConfigLease(t, url, 10)
	t.Run("KeyValue", func(t *testing.T) { exerciseKeyValue(t, config) })
	t.Run("Documents", func(t *testing.T) { exerciseDocuments(t, config) })
	t.Run("Objects", func(t *testing.T) { exerciseObjects(t, config) })
	t.Run("TheLeaseIsReleasedAfterEach", func(t *testing.T) {
		r := cli(t, nil, "kv", "set", "k", "v", "--config", config)
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("kv set = %d: %s", r.code, r.stderr)
		}
		rec := readLease(t, url)
		if !rec.Present || !rec.Holder.Released || rec.Holder.PID != r.pid {
			t.Fatalf("after the command the lease reads %+v, want released by pid %d", rec, r.pid)
		}
		out := ok(t, nil, "status", "--config", config)
		if !strings.HasPrefix(out, "no engine serves: engine "+rec.Holder.InstanceID+" on host "+rec.Holder.Host+" released the lease\n") {
			t.Fatalf("status after a command served = %q", out)
		}
		var st struct {
			Serving bool
			Reason  string
		}
		decodeOne(t, ok(t, nil, "status", "--config", config, "--output", "json"), &st)
		if st.Serving || !strings.Contains(st.Reason, "released the lease") {
			t.Fatalf("status --output json = %+v", st)
		}
	})
}

// historyEntry is an activity log entry as `history --output json` prints it.
type historyEntry struct {
	InstanceID string `json:"instance_id"`
	Event      string
	Time       string
}

// history waits until the activity log's newest entries are want (each
// "event instance"), newest first; the log is written in the background.
func history(t *testing.T, config string, want ...string) []historyEntry {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var out struct{ Entries []historyEntry }
		decodeOne(t, ok(t, nil, "history", "--config", config, "--output", "json"), &out)
		var got []string
		for _, e := range out.Entries {
			got = append(got, e.Event+" "+e.InstanceID)
		}
		if len(got) >= len(want) && strings.Join(got[:len(want)], "\n") == strings.Join(want, "\n") {
			return out.Entries
		}
		if time.Now().After(deadline) {
			t.Fatalf("the activity log reads, newest first:\n%s\nwant it to start with:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestHistoryNewestFirst(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	config := writeConfig(t, url)
	first := startEngine(t, config)
	first.waitLog(t, "state=serving")
	firstID := readLease(t, url).Holder.InstanceID
	history(t, config, "acquired "+firstID)
	if err := first.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := first.exitCode(t); code != 0 {
		t.Fatalf("exit code %d:\n%s", code, first.output())
	}

	second := startEngine(t, config)
	second.waitLog(t, "state=serving")
	secondID := readLease(t, url).Holder.InstanceID
	// A released lease is free: the next engine acquires it.
	entries := history(t, config, "acquired "+secondID, "released "+firstID, "acquired "+firstID)
	for i := 1; i < len(entries); i++ {
		if entries[i-1].Time < entries[i].Time {
			t.Fatalf("entry %d (%s) is older than entry %d (%s)", i-1, entries[i-1].Time, i, entries[i].Time)
		}
	}

	out := ok(t, nil, "history", "--config", config, "--limit", "2")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "  acquired  ") || !strings.Contains(lines[0], "engine "+secondID+" on host ") ||
		!strings.Contains(lines[1], "  released  ") || !strings.Contains(lines[1], "released the lease on shutdown") {
		t.Fatalf("history --limit 2 =\n%s", out)
	}
}

// A command's engine signs its calls with the caller secret; an HTTP API
// of its own would make those calls for anyone on the host who found its
// port, and on a host whose configuration switches the API off. While a
// command runs (here an upload from a pipe the test holds open), it must
// listen on no port at all.
func TestACommandListensOnNoPortWhileItRuns(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	dir := t.TempDir()
	config := filepath.Join(dir, "engine.yaml")
	yaml := fmt.Sprintf("nats:\n  url: %s\n  caller_secret: %s\n  engine: {lease_seconds: 10, drain_seconds: 1}\nhttp: {listen: \"off\"}\ndata_dir: %s\n",
		url, strings.Repeat("s", 40), filepath.Join(dir, "data"))
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	startEngine(t, config).waitLog(t, "state=serving")

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	cmd := exec.Command(engineBin, "obj", "put", "upload", "--config", config)
	cmd.Stdin = r
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = r.Close()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// The command reads its input only once its engine has started, and a
	// pipe holds far less than this: when the write returns, the command
	// is uploading, with whatever it listens on open.
	if _, err := w.Write(make([]byte, 4<<20)); err != nil {
		t.Fatalf("write to the command: %v\n%s", err, stderr.String())
	}
	if ports := listeningPorts(t, cmd.Process.Pid); len(ports) != 0 {
		t.Fatalf("the command listens on %v while it uploads; the configuration has http.listen off", ports)
	}
}

// listeningPorts are the TCP ports, IPv4 and IPv6, that process pid
// listens on, read from /proc: its socket inodes matched against the
// kernel's tables of listening sockets.
func listeningPorts(t *testing.T, pid int) []string {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if inode, ok := strings.CutPrefix(l, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	var ports []string
	for _, table := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// local_address is field 1 (hex address:port), st field 3
			// (0A: listening), inode field 9.
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] {
				continue
			}
			_, port, _ := strings.Cut(f[1], ":")
			n, _ := strconv.ParseUint(port, 16, 16)
			ports = append(ports, fmt.Sprintf("%s port %d", table, n))
		}
	}
	return ports
}

// A holder killed outright leaves its unreleased record in the lease for
// ever. Status must not call it serving: it believes a holder that renews,
// and after a lease with no renewal says what a contender would conclude.
func TestStatusDoesNotCallAKilledHolderServing(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	config := writeConfig(t, url) // lease_seconds: 1
	e := startEngine(t, config)
	e.waitLog(t, "state=serving")
	holder := readLease(t, url).Holder
	var st struct {
		Serving bool
		Reason  string
	}
	decodeOne(t, ok(t, nil, "status", "--config", config, "--output", "json"), &st)
	if !st.Serving {
		t.Fatalf("status says no engine serves while %s does: %s", holder.InstanceID, st.Reason)
	}

	if err := e.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.exitCode(t)
	decodeOne(t, ok(t, nil, "status", "--config", config, "--output", "json"), &st)
	if st.Serving || !strings.Contains(st.Reason, "no renewal in 1s") || !strings.Contains(st.Reason, holder.InstanceID) {
		t.Fatalf("status after the holder %s was killed = %+v, want not serving, for want of a renewal", holder.InstanceID, st)
	}
	if out := ok(t, nil, "status", "--config", config); !strings.HasPrefix(out, "no engine serves: no renewal in 1s") {
		t.Fatalf("status after the holder was killed:\n%s", out)
	}
}

// The first engine on an account holds the new lease key for a whole lease
// before it serves, renewing it all the while. Status says it does not
// serve yet, naming it, and that it serves once its start is done. Before,
// it saw the renewal and said the engine served, while every call to the
// account went unanswered.
func TestStatusDoesNotCallAnEngineServingBeforeItsHoldEnds(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	config := writeConfigLease(t, url, 20)
	e := startEngine(t, config)
	e.waitLog(t, "holding it a lease before serving")
	var st struct {
		Serving bool
		Reason  string
		Holder  struct {
			InstanceID string `json:"instance_id"`
		}
	}
	decodeOne(t, ok(t, nil, "status", "--config", config, "--output", "json"), &st)
	if !strings.Contains(e.output(), "state=serving") {
		if st.Serving || !strings.Contains(st.Reason, "does not serve yet") || st.Holder.InstanceID == "" ||
			!strings.Contains(st.Reason, st.Holder.InstanceID) {
			t.Fatalf("status during the first engine's hold = %+v, want not serving yet, naming the holder", st)
		}
	}

	e.waitLog(t, "state=serving")
	decodeOne(t, ok(t, nil, "status", "--config", config, "--output", "json"), &st)
	if !st.Serving {
		t.Fatalf("status says no engine serves once the hold is over: %s", st.Reason)
	}
}

func TestStatusWithoutALeaseBucketCreatesNone(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	out := ok(t, nil, "status", "--nats-url", url)
	if out != "no engine serves: the lease bucket ABI_ENGINE does not exist: no engine has served on this account\n" {
		t.Fatalf("status = %q", out)
	}
	var st struct{ Serving bool }
	decodeOne(t, ok(t, nil, "status", "--nats-url", url, "--output", "json"), &st)
	if st.Serving {
		t.Fatal("status --output json says an engine serves")
	}
	js, err := natstest.Connect(t, url).JetStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.KeyValue(jetstream.DefaultBucket); !errors.Is(err, nats.ErrBucketNotFound) {
		t.Fatalf("status created the lease bucket: %v", err)
	}
	failsWith(t, 1, "connect to NATS", "status", "--nats-url", "nats://127.0.0.1:1")
}

func TestCommandUsage(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "engine.yaml")
	if err := os.WriteFile(config, []byte("nats:\n  url: nats://127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"nosuch"}, `unknown command "nosuch"`},
		{[]string{"kv"}, "usage: engine kv get|set|del|ls"},
		{[]string{"kv", "put", "k"}, `engine kv: unknown command "put"`},
		{[]string{"kv", "get"}, "engine kv get: missing argument"},
		{[]string{"kv", "get", "a", "b"}, `engine kv get: unexpected argument "b"`},
		{[]string{"kv", "get", "k", "--output", "yaml"}, `--output is "yaml", want text or json`},
		{[]string{"kv", "get", "k", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"kv", "set", "k", "v", "--output", "json"}, "flag provided but not defined: -output"},
		{[]string{"kv", "set", "k", "v", "--ttl", "soon"}, `invalid value "soon" for flag -ttl`},
		{[]string{"kv", "set", "k", "v", "--ttl", "-1s"}, "--ttl is -1s, want 0 or more"},
		{[]string{"kv", "ls", "--limit", "-1"}, "--limit is -1, want 0 or more"},
		{[]string{"doc"}, "usage: engine doc get|put|del|find"},
		{[]string{"doc", "get", "c"}, "engine doc get: missing argument"},
		{[]string{"doc", "put", "c", "id", "[1]"}, "the document is not a JSON object"},
		// A stray bracket after the object is not JSON: it is refused, not
		// read as the object before it.
		{[]string{"doc", "put", "c", "id", `{"a":1}]`}, `the document is not one JSON object: "]" after the JSON value`},
		{[]string{"doc", "put", "c", "id", `{"a":1} {}`}, "the document is not one JSON object: more than one JSON value"},
		{[]string{"doc", "find", "c", "--where", `{"a":1}}`}, `--where is not one JSON object: "}" after the JSON value`},
		{[]string{"doc", "put", "c", "id", "{}", "--if-version", "x"}, "want a version number"},
		{[]string{"doc", "find", "c", "--where", "open"}, "--where is not a JSON object"},
		{[]string{"doc", "find", "c", "--limit", "0"}, "--limit is 0, want 1 to 1000"},
		{[]string{"obj"}, "usage: engine obj put|get|ls|rm"},
		{[]string{"obj", "put"}, "engine obj put: missing argument"},
		{[]string{"obj", "get", "k", "f", "g"}, `engine obj get: unexpected argument "g"`},
		{[]string{"status", "extra"}, `engine status: unexpected argument "extra"`},
		{[]string{"history", "extra"}, `engine history: unexpected argument "extra"`},
		{[]string{"history", "--limit", "0"}, "--limit is 0, want 1 or more"},
		{[]string{"status", "--data-dir", dir}, "flag provided but not defined: -data-dir"},
	}
	for _, c := range cases {
		// A usage error stops before the configuration's broker is dialled.
		failsWith(t, 2, c.want, append(c.args, "--config", config)...)
	}
	if out := ok(t, nil, "help"); !strings.Contains(out, "kv get|set|del|ls") {
		t.Fatalf("help = %q", out)
	}
	if r := cli(t, nil, "kv", "get", "-h"); r.code != 0 || !strings.Contains(r.stderr, "usage: engine kv get KEY") {
		t.Fatalf("kv get -h = %d, %q", r.code, r.stderr)
	}
	failsWith(t, 1, "connect to NATS", "kv", "get", "k", "--config", config)
}

// A holder renews every quarter of its own lease, which may be longer than
// the one status runs with (a command on the default configuration next
// to an engine on a long lease). Status waits for the longer, the one the
// holder's record names, before it says no engine serves: judged by its
// own shorter lease, it called a holder that still renewed dead between
// two renewals. Here the record is written by hand and never renewed, so
// status must wait the holder's lease, not its own, to say so.
func TestStatusWaitsTheLeaseItsHolderRenewsBy(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	config := writeConfig(t, url) // lease_seconds: 1
	l, err := jetstream.Open(t.Context(), natstest.Connect(t, url), jetstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	holder := domain.Holder{InstanceID: domain.NewInstanceID(), Host: "elsewhere", PID: 7, Version: "dev", StartedAt: time.Now(), Lease: 3 * time.Second}
	if _, err := l.Create(t.Context(), holder); err != nil {
		t.Fatal(err)
	}
	var st struct {
		Serving bool
		Reason  string
	}
	decodeOne(t, ok(t, nil, "status", "--config", config, "--output", "json"), &st)
	if st.Serving || !strings.Contains(st.Reason, "no renewal in 3s (a lease, the one its holder renews by)") {
		t.Fatalf("status of a holder renewing by a 3s lease, never renewed, run with a 1s lease = %+v; want no renewal in 3s", st)
	}
}

// doc find --limit above the most a page holds is a usage error naming the
// flag, as one below 1 is, before anything is sent. Before, it went to the
// engine, which refused it as an error of the wire's limit, exit code 1.
func TestADocFindPageAboveTheMostIsAUsageErrorOfTheFlag(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "engine.yaml")
	if err := os.WriteFile(config, []byte("nats:\n  url: nats://127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	failsWith(t, 2, "engine doc find: --limit is 1001, want 1 to 1000", "doc", "find", "c", "--limit", "1001", "--config", config)
}

// A --ttl the stores would refuse, below a millisecond or above the most a
// value may live, is a usage error naming the flag, before anything is
// sent. Before, only one below a nanosecond was: the rest went to the
// engine, which refused them as an error of the wire's ttl_seconds, with
// exit code 1, and a duration too large for Go's was called no duration.
func TestATTLTheStoresWouldRefuseIsAUsageErrorOfTheFlag(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "engine.yaml")
	if err := os.WriteFile(config, []byte("nats:\n  url: nats://127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for ttl, want := range map[string]string{
		"1ns":       `invalid value "1ns" for flag -ttl: "1ns" is below 1ms`,
		"999us":     `invalid value "999us" for flag -ttl: "999us" is below 1ms`,
		"87601h":    `invalid value "87601h" for flag -ttl: "87601h" is more than the most, 87600h0m0s`,
		"99999999h": `invalid value "99999999h" for flag -ttl: want a duration such as 10m, at most 87600h0m0s`,
	} {
		failsWith(t, 2, want, "kv", "set", "k", "v", "--ttl", ttl, "--config", config)
	}
}

// A command next to the first engine on an account, which holds the new
// lease key for a lease before it serves, finds no engine answering. It
// fails naming the engine the lease names and how to tell whether it is
// starting. Before, it said only "engine unavailable: nats: no responders
// available for request".
func TestACommandNoEngineAnswersNamesTheHolderOfTheLease(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	config := writeConfigLease(t, url, 60)
	e := startEngine(t, config)
	e.waitLog(t, "holding it a lease before serving")
	holder := readLease(t, url).Holder
	r := cli(t, nil, "kv", "get", "k", "--config", config)
	if r.code != 1 || !strings.Contains(r.stderr, "engine unavailable") ||
		!strings.Contains(r.stderr, "the lease names engine "+holder.InstanceID) || !strings.Contains(r.stderr, "engine status") {
		t.Fatalf("kv get during the first engine's hold = %d\nstdout: %s\nstderr: %s\nwant 1, naming engine %s", r.code, r.stdout, r.stderr, holder.InstanceID)
	}
}
