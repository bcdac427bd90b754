package enginecmd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/abi-engine/engine/internal/natstest"
)

// outputConfig writes the configuration of an engine the commands serve
// on their own, on srv, and returns its path.
func outputConfig(t *testing.T, srv interface{ ClientURL() string }) string {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "engine.yaml")
	yaml := fmt.Sprintf("nats:\n  url: %s\n  engine: {lease_seconds: 1, drain_seconds: 1}\nhttp: {listen: \"off\"}\ndata_dir: %s\n"+
		"services:\n  vector_store: {adapter: off}\n", srv.ClientURL(), filepath.Join(dir, "data"))
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
	cfg := outputConfig(t, natstest.StartServer(t))
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
