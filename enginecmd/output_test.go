package enginecmd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	docmemory "github.com/abi-engine/engine/adapters/secondary/document/memory"
	lease "github.com/abi-engine/engine/adapters/secondary/lease/jetstream"
	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// outputConfig writes the configuration, of a lease of leaseSeconds, of an
// engine the commands serve on their own, on srv, and returns its path.
func outputConfig(t *testing.T, srv interface{ ClientURL() string }, leaseSeconds int) string {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "engine.yaml")
	yaml := fmt.Sprintf("nats:\n  url: %s\n  engine: {lease_seconds: %d, drain_seconds: 1}\nhttp: {listen: \"off\"}\ndata_dir: %s\n"+
		"services:\n  vector_store: {adapter: off}\n", srv.ClientURL(), leaseSeconds, filepath.Join(dir, "data"))
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ABI_ENGINE_ROLE", "")
	return cfg
}

// A document or value any caller of the account wrote may hold characters
// a terminal obeys that encoding/json leaves raw: DEL, the C1 controls
// (U+009B opens a control sequence as ESC [ does), and invisible format
// characters such as U+202E, which turns the rest of the line right to
// left. doc get, doc find and kv get --output json print them as \u
// escapes, the same JSON; they printed them raw. A space, of any script,
// is printed as it is.
func TestJSONOutputEscapesTheCharactersATerminalObeys(t *testing.T) {
	cfg := outputConfig(t, natstest.StartServer(t), 1)
	run := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := Run(append(args, "--config", cfg), &stdout, &stderr, Options{}); code != exitOK {
			t.Fatalf("Run(%q) = %d: %s", args, code, stderr.String())
		}
		return stdout.String()
	}
	value := "a\u009b2Jb\u007fc\u202ed\U000E0041e\u3000f"
	escaped := `"a\u009b2Jb\u007fc\u202ed\udb40\udc41e` + "\u3000" + `f"`
	var back string
	if err := json.Unmarshal([]byte(escaped), &back); err != nil || back != value {
		t.Fatalf("the escaped string reads %q, %v; want %q", back, err, value)
	}
	doc, err := json.Marshal(map[string]string{"v": value})
	if err != nil {
		t.Fatal(err)
	}
	run("doc", "put", "c", "id", string(doc))
	run("kv", "set", "k", value)
	for _, args := range [][]string{
		{"doc", "get", "c", "id"},
		{"doc", "get", "c", "id", "--output", "json"},
		{"doc", "find", "c"},
		{"doc", "find", "c", "--output", "json"},
		{"kv", "get", "k", "--output", "json"},
	} {
		out := run(args...)
		if i := strings.IndexFunc(out, func(r rune) bool { return r == 0x7f || r >= 0x80 && r <= 0x9f || r == 0x202e || r == 0xe0041 }); i >= 0 {
			t.Errorf("engine %s printed a character a terminal obeys raw, at byte %d: %q", strings.Join(args, " "), i, out)
		}
		if !strings.Contains(out, escaped) {
			t.Errorf("engine %s printed %q, want it to hold %s", strings.Join(args, " "), out, escaped)
		}
	}
}

// oddHolder is a lease holder whose names hold characters a terminal obeys
// and a line end.
func oddHolder() domain.Holder {
	h := domain.ThisProcess("1.0\u009b2J", "r\n7")
	h.Host = "web\x1b]0;owned\x07"
	return h
}

// holdOddly writes the lease record of oddHolder on nc's broker and renews
// it, answering as a serving engine does, until the returned stop is
// called.
func holdOddly(t *testing.T, nc *nats.Conn) (h domain.Holder, stop func()) {
	t.Helper()
	l, err := lease.Open(t.Context(), nc, lease.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h = oddHolder()
	rev, err := l.Create(t.Context(), h)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := nc.Subscribe(wire.Subject(wire.ServiceEngine, wire.EngineInfo), func(m *nats.Msg) { _ = m.Respond([]byte("{}")) })
	if err != nil {
		t.Fatal(err)
	}
	renewing, stopRenewing := context.WithCancel(context.Background())
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		for rev := rev; renewing.Err() == nil; {
			next, err := l.Update(renewing, h, rev)
			if err != nil {
				return
			}
			rev = next
			select {
			case <-renewing.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	stop = func() {
		stopRenewing()
		<-renewed
		_ = sub.Unsubscribe()
	}
	t.Cleanup(stop)
	return h, stop
}

// obeyed reports whether r is one of the characters oddHolder's names hold
// that a terminal obeys.
func obeyed(r rune) bool { return r == '\x1b' || r == '\a' || r == '\u009b' }

// The names status prints come from the lease record, which any engine or
// operator of the account writes: a host, version or rollout holding a
// control character is printed quoted, one field a line, and a reason
// naming the holder has its control characters escaped. They were printed
// raw, so a record could rewrite the operator's terminal or add lines to
// what status said.
func TestStatusPrintsTheHoldersNamesWithControlCharactersEscaped(t *testing.T) {
	srv := natstest.StartServer(t)
	// A lease long beside the renewals' 50 ms: a loaded machine does not
	// make the holder look dead while it renews.
	cfg := outputConfig(t, srv, 10)
	h, stop := holdOddly(t, natstest.Connect(t, srv.ClientURL()))
	status := func() string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := Run([]string{"status", "--config", cfg}, &stdout, &stderr, Options{}); code != exitOK {
			t.Fatalf("status = %d: %s", code, stderr.String())
		}
		return stdout.String()
	}
	out := status()
	for _, want := range []string{
		"engine " + h.InstanceID + " serves\n",
		"  host:        \"web\\x1b]0;owned\\a\"\n",
		"  version:     \"1.0\\u009b2J\"\n",
		"  rollout:     \"r\\n7\"\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status of a serving holder printed %q, want it to hold %q", out, want)
		}
	}
	if strings.IndexFunc(out, obeyed) >= 0 {
		t.Errorf("status of a serving holder printed a control character raw: %q", out)
	}

	stop()
	out = status()
	if !strings.HasPrefix(out, "no engine serves: ") || strings.Count(out, "\n") != 3 || strings.IndexFunc(out, obeyed) >= 0 ||
		!strings.Contains(out, `host web\x1b]0;owned\a (pid`) || !strings.Contains(out, `rollout r\n7,`) {
		t.Errorf("status of a holder gone silent printed %q, want the reason on one line, its control characters escaped", out)
	}
}

// An error may carry text from the engine or the lease: serve refused by
// a holder names it with its control characters escaped, on one line. It
// printed the holder's names raw.
func TestAnErrorNamingTheHolderHasItsControlCharactersEscaped(t *testing.T) {
	srv := natstest.StartServer(t)
	cfg := outputConfig(t, srv, 10)
	h, _ := holdOddly(t, natstest.Connect(t, srv.ClientURL()))
	var stderr bytes.Buffer
	code := Run([]string{"serve", "--config", cfg}, io.Discard, &stderr, Options{})
	var refusal string
	for l := range strings.Lines(stderr.String()) {
		if strings.HasPrefix(l, "engine: ") {
			refusal = l
		}
	}
	if code != exitError || !strings.Contains(refusal, h.InstanceID+` on host web\x1b]0;owned\a (pid`) ||
		!strings.Contains(refusal, `rollout r\n7,`) || strings.IndexFunc(stderr.String(), obeyed) >= 0 {
		t.Errorf("serve beside a holder = %d, stderr %q; want 1 naming it on one line, its control characters escaped", code, stderr.String())
	}
}

// A key or id the command echoes from the engine is printed as a listing
// prints it: quoted when it holds a control character, so the line stays
// one. doc get's heading, doc put's and obj put's answers printed it raw.
func TestAnEchoedKeyWithControlCharactersIsPrintedQuoted(t *testing.T) {
	cfg := outputConfig(t, natstest.StartServer(t), 1)
	file := filepath.Join(t.TempDir(), "object")
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
	const key, shown = "a\nb\x1b[2J", `"a\nb\x1b[2J"`
	if out := run("doc", "put", "c", key, "{}"); !strings.HasPrefix(out, "c/"+shown+" version ") || strings.Count(out, "\n") != 1 {
		t.Errorf("doc put printed %q", out)
	}
	if out, _, _ := strings.Cut(run("doc", "get", "c", key), "\n"); !strings.HasPrefix(out, "# c/"+shown+" version ") {
		t.Errorf("doc get's heading is %q", out)
	}
	if out := run("obj", "put", key, file); !strings.HasPrefix(out, shown+": 1 bytes, etag ") || strings.Count(out, "\n") != 1 {
		t.Errorf("obj put printed %q", out)
	}
}

// The activity log's names and details come from lease records and errors
// engines saw: history prints a name holding a control character quoted
// and a detail with its control characters escaped, one entry a line.
// They were printed raw.
func TestHistoryPrintsNamesAndDetailsWithControlCharactersEscaped(t *testing.T) {
	srv := natstest.StartServer(t)
	cfg := outputConfig(t, srv, 1)
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, append(b, "  document: {adapter: shared}\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	sharedDocuments = docmemory.New()
	docs := sharedDocuments
	h := oddHolder()
	entry := map[string]any{
		"instance_id": h.InstanceID, "host": h.Host, "pid": 42, "version": h.Version, "rollout": h.RolloutID,
		"event": "took_over", "detail": "took over from " + h.String(), "revision": 7, "time": "2026-12-07T06:00:00.000000000Z",
	}
	if err := docs.EnsureCollection(t.Context(), app.ActivityCollection); err != nil {
		t.Fatal(err)
	}
	if _, err := docs.Put(t.Context(), app.ActivityCollection, "2026-12-07T06:00:00.000000000Z_"+h.InstanceID, entry, ports.Cond{}); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := Run([]string{"history", "--config", cfg}, &stdout, &stderr, Options{}); code != exitOK {
		t.Fatalf("history = %d: %s", code, stderr.String())
	}
	var line string
	for l := range strings.Lines(stdout.String()) {
		if strings.Contains(l, h.InstanceID+" on host") {
			line = l
		}
	}
	want := `took_over          engine ` + h.InstanceID + ` on host "web\x1b]0;owned\a" (pid 42, version "1.0\u009b2J", rollout "r\n7", revision 7): took over from engine ` +
		h.InstanceID + ` on host web\x1b]0;owned\a (pid `
	if !strings.Contains(line, want) || strings.IndexFunc(stdout.String(), obeyed) >= 0 {
		t.Errorf("history printed %q, want the entry on one line holding %q", stdout.String(), want)
	}
}
