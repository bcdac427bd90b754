package enginecmd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/fx"

	kvmemory "github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
	"github.com/abi-engine/engine/adapters/secondary/storage"
	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/app/config"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

func TestUsage(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--no-such-flag"}, 2, "flag provided but not defined"},
		{[]string{"extra"}, 2, `unknown command "extra"`},
		{[]string{"serve", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"config"}, 2, "usage: engine config check"},
		{[]string{"config", "check", "--config", "/nonexistent/engine.yaml"}, 1, "read configuration"},
		{[]string{"--config", "/nonexistent/engine.yaml"}, 1, "read configuration"},
	}
	for _, c := range cases {
		var stderr bytes.Buffer
		if code := Run(c.args, io.Discard, &stderr, Options{}); code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("Run(%q) = %d, %q; want %d and %q", c.args, code, stderr.String(), c.code, c.want)
		}
	}
}

// An operator's first try, engine --help, showed the flags of serve alone,
// with no word of the other commands; --version was a usage error.
func TestHelpAndVersionAnswerForTheWholeCommand(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"-help"}, {"--help"}} {
		var stdout, stderr bytes.Buffer
		if code := Run(args, &stdout, &stderr, Options{}); code != 0 || !strings.Contains(stdout.String(), "kv get|set|del|ls") {
			t.Errorf("Run(%q) = %d, stdout %q, stderr %q; want 0 and the command list", args, code, stdout.String(), stderr.String())
		}
	}
	for _, args := range [][]string{{"version"}, {"-version"}, {"--version"}} {
		var stdout, stderr bytes.Buffer
		if code := Run(args, &stdout, &stderr, Options{Version: "1.2.3"}); code != 0 || stdout.String() != "engine 1.2.3\n" {
			t.Errorf("Run(%q) = %d, stdout %q, stderr %q; want 0 and %q", args, code, stdout.String(), stderr.String(), "engine 1.2.3\n")
		}
	}
	// A command's own -h still shows that command's flags.
	var stderr bytes.Buffer
	if code := Run([]string{"serve", "-h"}, io.Discard, &stderr, Options{}); code != 0 || !strings.Contains(stderr.String(), "-data-dir") {
		t.Errorf("Run(serve -h) = %d, %q; want 0 and serve's flags", code, stderr.String())
	}
}

// engine version extra printed the version and engine help kv the whole
// list, as if the argument were not there. A word after version is a usage
// error; help names the command it was asked about.
func TestAnArgumentAfterHelpOrVersionIsNotIgnored(t *testing.T) {
	cases := []struct {
		args         []string
		code         int
		stdout, want string
	}{
		{[]string{"version", "extra"}, 2, "", `engine version: unexpected argument "extra"`},
		{[]string{"--version", "extra"}, 2, "", `engine version: unexpected argument "extra"`},
		{[]string{"help", "nosuch"}, 2, "", `engine help: unknown command "nosuch"`},
		{[]string{"help", "kv", "get"}, 2, "", `engine help: unexpected argument "get"`},
		{[]string{"help", "kv"}, 0, "usage: engine kv get|set|del|ls", ""},
		{[]string{"help", "obj"}, 0, "usage: engine obj put|get|ls|rm", ""},
		{[]string{"help", "doc"}, 0, "usage: engine doc get|put|del|find", ""},
		{[]string{"help", "config"}, 0, "usage: engine config check", ""},
		{[]string{"help", "status"}, 0, "", "usage: engine status"},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		code := Run(c.args, &stdout, &stderr, Options{})
		if code != c.code || !strings.HasPrefix(stdout.String(), c.stdout) || !strings.Contains(stderr.String(), c.want) ||
			c.stdout == "" && stdout.Len() > 0 || strings.Contains(stdout.String(), "history ") {
			t.Errorf("Run(%q) = %d\nstdout: %q\nstderr: %q\nwant %d, stdout starting %q, stderr holding %q", c.args, code, stdout.String(), stderr.String(), c.code, c.stdout, c.want)
		}
	}
}

// A key, id, prefix or collection every store refuses is known to be bad
// before any call: each command refuses it as a usage error naming the
// argument, exit code 2, before it dials the broker (here one that never
// answers). Before, it went to the engine and came back as an invalid
// argument, exit code 1.
func TestAKeyEveryStoreRefusesIsAUsageErrorNamingTheArgument(t *testing.T) {
	config := unansweredConfig(t)
	bad := "k\xff"
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"kv", "get", ""}, "engine kv get: KEY is empty"},
		{[]string{"kv", "get", bad}, `engine kv get: KEY "k\xff" is not UTF-8`},
		{[]string{"kv", "set", "", "v"}, "engine kv set: KEY is empty"},
		{[]string{"kv", "set", bad, "v"}, "engine kv set: KEY"},
		{[]string{"kv", "del", "a\x00b"}, `engine kv del: KEY "a\x00b" contains NUL`},
		{[]string{"kv", "ls", bad}, "engine kv ls: PREFIX"},
		{[]string{"obj", "get", ""}, "engine obj get: KEY is empty"},
		{[]string{"obj", "put", bad, "-"}, "engine obj put: KEY"},
		{[]string{"obj", "rm", ""}, "engine obj rm: KEY is empty"},
		{[]string{"obj", "ls", bad}, "engine obj ls: PREFIX"},
		{[]string{"doc", "get", "c", ""}, "engine doc get: ID is empty"},
		{[]string{"doc", "put", "c", bad, "{}"}, "engine doc put: ID"},
		{[]string{"doc", "del", "c", ""}, "engine doc del: ID is empty"},
		{[]string{"doc", "get", "", "id"}, `engine doc get: collection name ""`},
		{[]string{"doc", "find", "a b"}, `engine doc find: collection name "a b"`},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		args := append(c.args, "--config", config)
		if code := Run(args, &stdout, &stderr, Options{}); code != 2 || !strings.Contains(stderr.String(), c.want) || stdout.Len() > 0 {
			t.Errorf("Run(%q) = %d\nstdout: %q\nstderr: %q\nwant 2 and %q", args, code, stdout.String(), stderr.String(), c.want)
		}
	}
}

// obj put KEY DIR, a directory where a file is expected, is refused before
// an engine starts (here its broker never answers), in one message naming
// the directory. Before, the engine started, perhaps claiming the lease,
// and the first read of the upload failed, with "put" said twice.
func TestAnObjectPutOfADirectoryIsRefusedBeforeAnEngineStarts(t *testing.T) {
	dir, config := t.TempDir(), unansweredConfig(t)
	var stdout, stderr bytes.Buffer
	code := Run([]string{"obj", "put", "k", dir, "--config", config}, &stdout, &stderr, Options{})
	want := fmt.Sprintf("engine: obj put: %s is a directory, want a file\n", dir)
	if code != 1 || stderr.String() != want || stdout.Len() > 0 {
		t.Fatalf("obj put k DIR = %d\nstdout: %q\nstderr: %q\nwant 1 and %q alone", code, stdout.String(), stderr.String(), want)
	}
}

// obj get KEY DIR, a directory where the object should be written, is
// refused before an engine starts, as obj put refuses one to read. Before,
// the engine started, perhaps claiming the lease, and the download began
// before the directory was found.
func TestAnObjectGetIntoADirectoryIsRefusedBeforeAnEngineStarts(t *testing.T) {
	dir, config := t.TempDir(), unansweredConfig(t)
	var stdout, stderr bytes.Buffer
	code := Run([]string{"obj", "get", "k", dir, "--config", config}, &stdout, &stderr, Options{})
	want := fmt.Sprintf("engine: obj get: %s is a directory, want a file\n", dir)
	if code != 1 || stderr.String() != want || stdout.Len() > 0 {
		t.Fatalf("obj get k DIR = %d\nstdout: %q\nstderr: %q\nwant 1 and %q alone", code, stdout.String(), stderr.String(), want)
	}
}

// A doc find field every store refuses, in --order-by or --where, is a
// usage error naming the flag, exit code 2, before the broker is dialled
// (here one that never answers). Before, it went to the engine and came
// back as an invalid argument, exit code 1.
func TestADocFindFieldEveryStoreRefusesIsAUsageErrorOfTheFlag(t *testing.T) {
	config := unansweredConfig(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--order-by", `a"b`}, `engine doc find: --order-by: field "a\"b" contains a quote or backslash`},
		{[]string{"--order-by", "a\x00b"}, `engine doc find: --order-by: field "a\x00b" contains NUL`},
		{[]string{"--where", `{"a\\b":1}`}, `engine doc find: --where: field "a\\b" contains a quote or backslash`},
		{[]string{"--where", `{"":1}`}, `engine doc find: --where: field is empty`},
	} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"doc", "find", "c", "--config", config}, c.args...)
		if code := Run(args, &stdout, &stderr, Options{}); code != 2 || !strings.Contains(stderr.String(), c.want) || stdout.Len() > 0 {
			t.Errorf("Run(%q) = %d\nstdout: %q\nstderr: %q\nwant 2 and %q", args, code, stdout.String(), stderr.String(), c.want)
		}
	}
}

// obj get KEY FILE whose directory is missing, or is a file, is refused
// before an engine starts, naming the path. Before, the engine started,
// perhaps claiming the lease, and fetched the object before the file could
// not be made.
func TestAnObjectGetIntoAMissingDirectoryIsRefusedBeforeAnEngineStarts(t *testing.T) {
	dir, config := t.TempDir(), unansweredConfig(t)
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(dir, "missing", "out"), "no such file or directory"},
		{filepath.Join(config, "out"), "is not a directory"},
	} {
		var stdout, stderr bytes.Buffer
		code := Run([]string{"obj", "get", "k", tc.path, "--config", config}, &stdout, &stderr, Options{})
		prefix := fmt.Sprintf("engine: obj get: %s: ", tc.path)
		if code != 1 || !strings.HasPrefix(stderr.String(), prefix) || !strings.Contains(stderr.String(), tc.want) || strings.Count(stderr.String(), "\n") != 1 || stdout.Len() > 0 {
			t.Errorf("obj get k %s = %d\nstdout: %q\nstderr: %q\nwant 1 and one line %q... saying %q", tc.path, code, stdout.String(), stderr.String(), prefix, tc.want)
		}
	}
}

func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("nats:\n  url: nats://user:hunter2@127.0.0.1:4222,nats://T0KENs3cret@127.0.0.2:4222\n  caller_secret: s3cret-s3cret-s3cret-s3cret-s3cret\nhttp: {token: httpt0ken}\nservices:\n  vector_store: {adapter: off}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := Run([]string{"config", "check", "--config", good}, &stdout, &stderr, Options{}); code != 0 {
		t.Fatalf("config check of a good file = %d: %s", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"configuration is valid", "keyvalue (sqlite): on this host: SQLite at", "vector_store (off): switched off",
		"NATS callers: each call carries a token", "HTTP API on 127.0.0.1:8080: a bearer token"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, secret := range []string{"hunter2", "s3cret", "T0KENs3cret", "httpt0ken"} {
		if strings.Contains(out, secret) {
			t.Errorf("output shows the secret %q:\n%s", secret, out)
		}
	}

	onNATS := filepath.Join(dir, "nats.yaml")
	if err := os.WriteFile(onNATS, []byte("services:\n  keyvalue: {adapter: jetstream, config: {bucket: ABI_KV, replicas: 3}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	if code := Run([]string{"config", "check", "--config", onNATS}, &stdout, &stderr, Options{}); code != 0 ||
		!strings.Contains(stdout.String(), "keyvalue (jetstream): shared: JetStream bucket ABI_KV, 3 replica(s)") {
		t.Fatalf("config check of a JetStream keyvalue = %d:\n%s%s", code, stdout.String(), stderr.String())
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("nats:\n  engine:\n    lease_seconds: 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if code := Run([]string{"config", "check", "--config", bad}, io.Discard, &stderr, Options{}); code != 1 || !strings.Contains(stderr.String(), "lease_seconds") {
		t.Fatalf("config check of a bad file = %d, %q; want 1 naming lease_seconds", code, stderr.String())
	}
	stderr.Reset()
	t.Setenv("ABI_ROLLOUT_ID", "r7")
	if code := Run([]string{"config", "check", "--config", good}, io.Discard, &stderr, Options{}); code != 1 || !strings.Contains(stderr.String(), "needs shared backends") {
		t.Fatalf("config check of a rollout on local backends = %d, %q", code, stderr.String())
	}
}

func TestProgressBar(t *testing.T) {
	var w bytes.Buffer
	p := &progress{w: &w, label: "put big", total: 3 << 20}
	if _, err := io.Copy(io.Discard, p.reader(bytes.NewReader(make([]byte, 3<<20)))); err != nil {
		t.Fatal(err)
	}
	p.finish()
	out := w.String()
	if !strings.HasPrefix(out, "\rput big [") || !strings.HasSuffix(out, "] 100% 3.0 MiB / 3.0 MiB\n") {
		t.Fatalf("bar = %q", out)
	}

	w.Reset()
	small := &progress{w: &w, label: "put small", total: 1 << 20}
	if _, err := io.Copy(io.Discard, small.reader(bytes.NewReader(make([]byte, 1<<20)))); err != nil {
		t.Fatal(err)
	}
	small.finish()
	if w.Len() != 0 {
		t.Fatalf("a transfer of 1 MiB drew %q", w.String())
	}

	w.Reset()
	unknown := &progress{w: &w, label: "put stdin"}
	if _, err := io.Copy(io.Discard, unknown.reader(bytes.NewReader(make([]byte, 2<<20)))); err != nil {
		t.Fatal(err)
	}
	unknown.finish()
	if !strings.HasSuffix(w.String(), "\rput stdin 2.0 MiB\n") {
		t.Fatalf("a bar of unknown size = %q", w.String())
	}

	if newProgress(&w, "x", 3<<20) != nil {
		t.Fatal("a bar on a buffer, which is no terminal")
	}
}

// sharedKV is a keyvalue adapter this test registers as a program would:
// every engine the commands start opens the same store, so a value set by
// one command is read by the next only if the adapter was really used.
type sharedKV struct{ *kvmemory.Store }

func (sharedKV) Close() error { return nil }

var shared = kvmemory.New()

type sharedKVConfig struct {
	Label    string `yaml:"label"`
	Password string `yaml:"password" secret:"true"`
}

func (sharedKVConfig) LocalStorage() string { return "" }

// recorder is a module that counts its starts.
type recorder struct{ started *atomic.Int32 }

func (recorder) Name() string    { return "recorder" }
func (recorder) Needs() []string { return []string{ports.ServiceKeyValue} }
func (r recorder) Start(context.Context, app.ModuleEnv) error {
	r.started.Add(1)
	return nil
}
func (recorder) Stop(context.Context) error { return nil }

func init() {
	storage.Register(ports.ServiceKeyValue, "shared", func(_ context.Context, _ sharedKVConfig) (sharedKV, error) {
		return sharedKV{shared}, nil
	})
}

// A program's own adapter and module, given to Run, serve the client
// commands and appear in config check as the built-in ones do.
func TestRunWithAProgramsAdapterAndModule(t *testing.T) {
	srv := natstest.StartServer(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "engine.yaml")
	yaml := fmt.Sprintf("nats:\n  url: %s\n  engine: {lease_seconds: 1, drain_seconds: 1}\nhttp: {listen: \"127.0.0.1:0\"}\ndata_dir: %s\n"+
		"services:\n  keyvalue: {adapter: shared, config: {label: visible-label, password: hidden-password}}\n  vector_store: {adapter: off}\n",
		srv.ClientURL(), filepath.Join(dir, "data"))
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ABI_ENGINE_ROLE", "")
	var started atomic.Int32
	o := Options{Modules: []fx.Option{app.AsModule(func() recorder { return recorder{&started} })}}
	run := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := Run(append(args, "--config", cfg), &stdout, &stderr, o); code != 0 {
			t.Fatalf("engine %q = %d: %s", args, code, stderr.String())
		}
		return stdout.String()
	}
	run("kv", "set", "k", "through the program's adapter")
	if got, err := shared.Get(t.Context(), "k"); err != nil || string(got) != "through the program's adapter" {
		t.Fatalf("the registered store holds %q, %v", got, err)
	}
	if out := run("kv", "get", "k"); out != "through the program's adapter" {
		t.Fatalf("kv get = %q", out)
	}
	if n := started.Load(); n != 2 {
		t.Fatalf("the module started %d times for two commands, want 2", n)
	}
	out := run("config", "check")
	for _, want := range []string{"adapter: shared", "label: visible-label", "keyvalue (shared): shared: every engine reaches it"} {
		if !strings.Contains(out, want) {
			t.Errorf("config check lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hidden-password") {
		t.Errorf("config check shows the adapter's secret:\n%s", out)
	}
}

func TestConfigCheckRefusesACallerSecretThatCameOutEmpty(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "engine.yaml")
	if err := os.WriteFile(path, []byte("nats:\n  url: nats://u:hunter2@nats:4222\n  caller_secret: ${ENGINE_CALLER_SECRET}\nhttp: {token: tok}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ENGINE_CALLER_SECRET", "")
	var stderr bytes.Buffer
	code := Run([]string{"config", "check", "--config", path}, io.Discard, &stderr, Options{})
	msg := stderr.String()
	if code != exitError || !strings.Contains(msg, "nats.caller_secret") || !strings.Contains(msg, "ENGINE_CALLER_SECRET") {
		t.Fatalf("config check = %d, %q; want 1 naming the key and the variable", code, msg)
	}
	stderr.Reset()
	if code := Run([]string{"serve", "--config", path}, io.Discard, &stderr, Options{}); code != exitError || !strings.Contains(stderr.String(), "ENGINE_CALLER_SECRET") {
		t.Fatalf("serve = %d, %q; want 1 naming the variable", code, stderr.String())
	}
	// Set, but with an HTTP API anyone may call on the engine's behalf.
	t.Setenv("ENGINE_CALLER_SECRET", strings.Repeat("s", 32))
	if err := os.WriteFile(path, []byte("nats:\n  caller_secret: ${ENGINE_CALLER_SECRET}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if code := Run([]string{"serve", "--config", path}, io.Discard, &stderr, Options{}); code != exitError ||
		!strings.Contains(stderr.String(), "http.token") || !strings.Contains(stderr.String(), "http.listen to off") {
		t.Fatalf("serve with an unguarded HTTP API = %d, %q; want 1 saying why", code, stderr.String())
	}
}

// serve keeps a floor under the collector's heap unless GOGC says
// otherwise, and gives the collector its own setting back when it returns.
func TestServeKeepsAHeapFloorUnlessGOGCIsSet(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "engine.yaml")
	// A configuration that loads, with a broker nobody runs: serve gets
	// past the collector, and fails to start.
	yaml := fmt.Sprintf("nats:\n  url: nats://127.0.0.1:1\nhttp: {listen: \"off\"}\ndata_dir: %s\n", filepath.Join(dir, "data"))
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	for _, c := range []struct {
		gogc  string
		floor bool
	}{{"", true}, {"100", false}, {"off", false}} {
		t.Run("GOGC="+c.gogc, func(t *testing.T) {
			t.Setenv("GOGC", c.gogc)
			var stderr bytes.Buffer
			if code := Run([]string{"serve", "--config", path}, io.Discard, &stderr, Options{}); code != exitError {
				t.Fatalf("serve = %d, want %d: %s", code, exitError, stderr.String())
			}
			if got := strings.Contains(stderr.String(), "garbage collector waits"); got != c.floor {
				t.Fatalf("with GOGC=%q the floor was kept: %v, want %v\n%s", c.gogc, got, c.floor, stderr.String())
			}
			if p := debug.SetGCPercent(100); p != 100 {
				t.Fatalf("serve left the collector at %d percent", p)
			}
		})
	}
}

// No command shows a password it was given: not one with characters a URL
// takes in its user info unescaped ("(", ";"), which `config check` printed,
// and not one in a --nats-url the file would have refused, which went
// unchecked to nats.go, whose error quoted it whole.
func TestNoCommandShowsAPassword(t *testing.T) {
	path := filepath.Join(t.TempDir(), "engine.yaml")
	yaml := "nats:\n  url: \"nats://engine:hun(ter2@nats:4222\"\n" +
		"services:\n  keyvalue: {adapter: postgres, config: {dsn: \"postgres://kv:pg;secret@db:5432/engine\"}}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := Run([]string{"config", "check", "--config", path}, &stdout, &stderr, Options{}); code != 0 {
		t.Fatalf("config check = %d: %s", code, stderr.String())
	}
	for _, secret := range []string{"hun(ter2", "pg;secret"} {
		if strings.Contains(stdout.String()+stderr.String(), secret) {
			t.Errorf("config check shows the password %q:\n%s", secret, stdout.String())
		}
	}
	bad := "nats://engine:hunter2@127.0.0.1:4222x"
	for _, args := range [][]string{{"serve", "--nats-url", bad}, {"status", "--nats-url", bad}, {"kv", "get", "k", "--nats-url", bad}} {
		var stderr bytes.Buffer
		if code := Run(args, io.Discard, &stderr, Options{}); code != 1 || strings.Contains(stderr.String(), "hunter2") {
			t.Errorf("engine %q = %d, stderr:\n%s", args, code, stderr.String())
		}
	}
}

// A URL given with --nats-url replaces NATS_URL's, so an error about it
// must name the flag: naming the variable sent the operator to a value
// that was good and not in use.
func TestABadNATSURLFlagIsNamedInItsError(t *testing.T) {
	t.Setenv(config.EnvNATSURL, "nats://127.0.0.1:4222")
	for _, args := range [][]string{{"serve"}, {"status"}, {"kv", "get", "k"}} {
		args = append(args, "--nats-url", "http://127.0.0.1:4222")
		var stderr bytes.Buffer
		code := Run(args, io.Discard, &stderr, Options{})
		if code != 1 || !strings.Contains(stderr.String(), "nats.url (from --nats-url): ") {
			t.Errorf("engine %q = %d, want 1 and an error naming --nats-url:\n%s", args, code, stderr.String())
		}
	}
}

// A host whose configuration says role: client never serves, not even for
// one command with no engine about: `engine kv set` fails, and no backend
// is opened. Before, the command took the role auto, claimed the lease and
// wrote the value into backends of its own that no engine ever read.
func TestACommandOnAClientHostNeverServes(t *testing.T) {
	srv := natstest.StartServer(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	path := filepath.Join(dir, "engine.yaml")
	yaml := fmt.Sprintf("nats:\n  url: %s\n  engine: {role: client, lease_seconds: 1, drain_seconds: 1}\nhttp: {listen: off}\ndata_dir: %s\n", srv.ClientURL(), data)
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ABI_ENGINE_ROLE", "")
	var stderr bytes.Buffer
	code := Run([]string{"kv", "set", "k", "v", "--config", path}, io.Discard, &stderr, Options{})
	opened, _ := os.ReadDir(data)
	if code == 0 || len(opened) > 0 {
		t.Fatalf("engine kv set on a client host: exit %d, %d entries opened in the data directory (stderr %q)", code, len(opened), stderr.String())
	}
}

// A document or a --where given to the CLI is held to the rules the wire
// holds every body to: a field given twice, or a string or name that is
// not UTF-8, is refused on the spot, naming what is wrong. Read leniently,
// the CLI kept the last of two values and turned bad bytes into U+FFFD,
// and sent the engine, which would have refused the text, a document the
// operator never wrote.
func TestTheCLIRefusesAJSONObjectTheWireWouldRefuse(t *testing.T) {
	// No engine is reachable: a command that got past its input would fail
	// to connect instead.
	t.Setenv(config.EnvNATSURL, "nats://127.0.0.1:1")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"doc", "put", "c", "d", `{"a":1,"a":2}`}, `"a" given twice`},
		{[]string{"doc", "put", "c", "d", `{"n":{"x":1,"x":1}}`}, `"n.x" given twice`},
		{[]string{"doc", "put", "c", "d", "{\"a\":\"b\xff\"}"}, "not UTF-8"},
		{[]string{"doc", "put", "c", "d", `{"a":"\ud800"}`}, "not UTF-8"},
		{[]string{"doc", "put", "c", "d", "{\"\xff\":1}"}, "not UTF-8"},
		{[]string{"doc", "find", "c", "--where", `{"s":"x","s":"y"}`}, `"s" given twice`},
		{[]string{"doc", "find", "c", "--where", "{\"s\":\"\xfe\"}"}, "not UTF-8"},
	} {
		var stderr bytes.Buffer
		code := Run(c.args, io.Discard, &stderr, Options{})
		if code != exitUsage || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("engine %q = %d, want %d and an error saying %s:\n%s", c.args, code, exitUsage, c.want, stderr.String())
		}
	}
}

// A --ttl below a nanosecond ("0.5ns") parses as the duration 0, which
// keeps the value for good: the CLI refuses it on the spot, as the HTTP
// API refuses ?ttl=0.5ns, rather than store forever a value the operator
// meant to expire at once.
func TestKVSetRefusesATTLThatRoundsToZero(t *testing.T) {
	// No engine is reachable: a command that got past its flags would fail
	// to connect instead.
	t.Setenv(config.EnvNATSURL, "nats://127.0.0.1:1")
	for _, ttl := range []string{"0.5ns", "0.000001us"} {
		var stderr bytes.Buffer
		code := Run([]string{"kv", "set", "k", "v", "--ttl", ttl}, io.Discard, &stderr, Options{})
		if code != exitUsage || !strings.Contains(stderr.String(), "ttl") || !strings.Contains(stderr.String(), "forever") {
			t.Errorf("engine kv set --ttl %s = %d, want %d and an error saying the ttl would keep the value forever:\n%s", ttl, code, exitUsage, stderr.String())
		}
	}
}

// A command that finds no engine serving the account serves it itself for
// as long as it runs. On an adapter that keeps its data in the process,
// that meant a set reported success for a value gone when the command
// returned, and a get reported "not found" whatever had been set before: it
// must refuse instead, naming the service and the adapter, and before it
// claims the lease, so no caller of the account is answered meanwhile by
// a store about to vanish.
func TestACommandServingAloneRefusesAServiceKeptInThisProcess(t *testing.T) {
	srv := natstest.StartServer(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "engine.yaml")
	yaml := fmt.Sprintf("nats:\n  url: %s\n  engine: {lease_seconds: 1, drain_seconds: 1}\nhttp: {listen: off}\ndata_dir: %s\n"+
		"services:\n  keyvalue: {adapter: memory}\n  document: {adapter: memory}\n  object_storage: {adapter: memory}\n  vector_store: {adapter: off}\n",
		srv.ClientURL(), filepath.Join(dir, "data"))
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ABI_ENGINE_ROLE", "")
	for _, args := range [][]string{
		{"kv", "set", "k", "v"},
		{"kv", "get", "k"},
		{"doc", "put", "c", "d", `{"a":1}`},
		{"history"},
		{"obj", "ls"},
	} {
		var stdout, stderr bytes.Buffer
		code := Run(append(args, "--config", path), &stdout, &stderr, Options{})
		if code == 0 || !strings.Contains(stderr.String(), "keeps its data in this process only") || !strings.Contains(stderr.String(), `"memory"`) {
			t.Errorf("engine %q with no engine serving and a memory adapter: exit %d, stdout %q, stderr %q", args, code, stdout.String(), stderr.String())
		}
	}
	js, err := jetstream.New(natstest.Connect(t, srv.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.KeyValue(t.Context(), "ABI_ENGINE"); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("after the refused commands the lease bucket: %v, want none made: a command claimed the lease before it refused", err)
	}
}

// A key with a newline, a tab or another control character, printed raw
// by kv ls, obj ls or doc find, read as two keys or rewrote the terminal.
// Such a key, and one that starts with a double quote, is printed quoted,
// so one key is one line; a plain key, spaces and all, is printed as it is.
func TestAListingPrintsAKeyWithControlCharactersQuotedOnOneLine(t *testing.T) {
	srv := natstest.StartServer(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "engine.yaml")
	yaml := fmt.Sprintf("nats:\n  url: %s\n  engine: {lease_seconds: 1, drain_seconds: 1}\nhttp: {listen: \"off\"}\ndata_dir: %s\n"+
		"services:\n  vector_store: {adapter: off}\n", srv.ClientURL(), filepath.Join(dir, "data"))
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ABI_ENGINE_ROLE", "")
	file := filepath.Join(dir, "object")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := Run(append(args, "--config", cfg), &stdout, &stderr, Options{}); code != exitOK {
			t.Fatalf("Run(%q) = %d: %s", args, code, stderr.String())
		}
		return stdout.String()
	}
	// In the order of their bytes, as the listings print them.
	keys := []string{`"g"`, "a\nb", "c\td", "e\x1b[2Jf", "plain key"}
	shown := []string{`"\"g\""`, `"a\nb"`, `"c\td"`, `"e\x1b[2Jf"`, "plain key"}
	for _, k := range keys {
		run("kv", "set", k, "v")
		run("obj", "put", k, file)
		run("doc", "put", "c", k, "{}")
	}
	lines := func(out string) []string { return strings.Split(strings.TrimSuffix(out, "\n"), "\n") }
	if got := lines(run("kv", "ls")); !slices.Equal(got, shown) {
		t.Errorf("kv ls printed %q, want %q", got, shown)
	}
	objects := lines(run("obj", "ls"))
	var objKeys []string
	for _, l := range objects {
		f := strings.SplitN(strings.TrimLeft(l, " "), "  ", 3)
		objKeys = append(objKeys, f[len(f)-1])
	}
	if !slices.Equal(objKeys, shown) {
		t.Errorf("obj ls printed %q, want keys %q", objects, shown)
	}
	var ids []string
	for _, l := range lines(run("doc", "find", "c")) {
		id, _, _ := strings.Cut(l, "\t")
		ids = append(ids, id)
	}
	if !slices.Equal(ids, shown) {
		t.Errorf("doc find printed ids %q, want %q", ids, shown)
	}
}

// config check reads a .env file the way the engine will as it opens its
// secrets: a file it would refuse is refused here, exit 1, naming the file,
// the line and the problem, never a value; a good one passes. It had only
// checked that a path was set, so a broken file was found by an engine
// serving for the first time.
func TestConfigCheckParsesTheDotenvFile(t *testing.T) {
	dir := t.TempDir()
	env := filepath.Join(dir, "secrets.env")
	path := filepath.Join(dir, "engine.yaml")
	if err := os.WriteFile(path, fmt.Appendf(nil, "services:\n  secret:\n    - {adapter: env}\n    - {adapter: dotenv, config: {path: %q}}\n", env), 0o600); err != nil {
		t.Fatal(err)
	}
	check := func(dotenv string) (int, string, string) {
		t.Helper()
		if err := os.WriteFile(env, []byte(dotenv), 0o600); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		code := Run([]string{"config", "check", "--config", path}, &stdout, &stderr, Options{})
		return code, stdout.String(), stderr.String()
	}
	for _, c := range []struct{ file, want string }{
		{"API_KEY=k-Zq9\nDB_PASSWORD='p-Zq9\n", env + ":2: DB_PASSWORD: single quote not closed"},
		{"API_KEY=k-Zq9\nAPI_KEY=Zq9\n", env + ":2: API_KEY is already set on line 1"},
		{"API_KEY=k-Zq9\nDB_PASSWORD: Zq9\n", env + ":2: the line is not NAME=value"},
		{"API_KEY=\"k-Zq9\" Zq9\n", env + ":1: API_KEY: text after the closing quote"},
	} {
		code, stdout, stderr := check(c.file)
		if code != exitError || !strings.Contains(stderr, c.want) || strings.Contains(stdout, "configuration is valid") {
			t.Errorf("config check of %q = %d\nstdout: %s\nstderr: %s\nwant 1 and %q", c.file, code, stdout, stderr, c.want)
		}
		if strings.Contains(stdout+stderr, "Zq9") {
			t.Errorf("config check of %q shows a value:\n%s%s", c.file, stdout, stderr)
		}
	}
	if err := os.Remove(env); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if code := Run([]string{"config", "check", "--config", path}, io.Discard, &stderr, Options{}); code != exitError ||
		!strings.Contains(stderr.String(), env) || !strings.Contains(stderr.String(), "no such file") {
		t.Errorf("config check of a missing file = %d, %q; want 1 naming the file", code, stderr.String())
	}
	code, stdout, stderr2 := check("# secrets\nAPI_KEY=k-Zq9\nDB_PASSWORD=\"p-Zq9\"\n")
	if code != exitOK || !strings.Contains(stdout, "configuration is valid") || strings.Contains(stdout+stderr2, "Zq9") {
		t.Errorf("config check of a good file = %d\nstdout: %s\nstderr: %s", code, stdout, stderr2)
	}
	// A client opens no store: the file may be on the serving host only.
	t.Setenv(config.EnvRole, "client")
	if code, stdout, stderr := check("DB_PASSWORD: Zq9\n"); code != exitOK || !strings.Contains(stdout, "configuration is valid") {
		t.Errorf("config check of a client's configuration = %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
}

// unansweredConfig writes a configuration whose broker never answers, for
// the commands that must refuse their input before they dial it, and
// returns its path.
func unansweredConfig(t *testing.T) string {
	t.Helper()
	config := filepath.Join(t.TempDir(), "engine.yaml")
	if err := os.WriteFile(config, []byte("nats:\n  url: nats://127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return config
}
