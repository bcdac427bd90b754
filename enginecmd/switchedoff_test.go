package enginecmd

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/abi-engine/engine/internal/natstest"
)

// A command on a service the configuration switches off fails before its
// engine starts, naming the service: it reaches no broker, claims no
// lease and opens nothing in the data directory. Before, its engine
// started first, and, with no engine serving, claimed the lease and
// opened the other services' stores, only for the command to find the
// service missing.
func TestACommandOnAServiceSwitchedOffFailsBeforeItsEngineStarts(t *testing.T) {
	srv := natstest.StartServer(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	path := filepath.Join(dir, "engine.yaml")
	yaml := fmt.Sprintf("nats:\n  url: %s\n  engine: {lease_seconds: 1, drain_seconds: 1}\nhttp: {listen: off}\ndata_dir: %s\n"+
		"services:\n  keyvalue: {adapter: off}\n  document: {adapter: off}\n  object_storage: {adapter: off}\n",
		srv.ClientURL(), data)
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ABI_ENGINE_ROLE", "")
	for _, c := range []struct {
		args    []string
		service string
	}{
		{[]string{"kv", "set", "k", "v"}, "keyvalue"},
		{[]string{"doc", "get", "c", "id"}, "document"},
		{[]string{"history"}, "document"},
		{[]string{"obj", "rm", "k"}, "object_storage"},
	} {
		var stderr bytes.Buffer
		code := Run(append(c.args, "--config", path), io.Discard, &stderr, Options{})
		want := "engine: the " + c.service + " service is switched off in the configuration\n"
		if code != exitError || stderr.String() != want {
			t.Errorf("engine %s = %d, stderr %q; want %d and %q", strings.Join(c.args, " "), code, stderr.String(), exitError, want)
		}
	}
	varz, err := srv.Varz(nil)
	if err != nil {
		t.Fatal(err)
	}
	jsz, err := srv.Jsz(nil)
	if err != nil {
		t.Fatal(err)
	}
	opened, _ := os.ReadDir(data)
	if varz.TotalConnections != 0 || jsz.Streams != 0 || len(opened) > 0 {
		t.Fatalf("the commands reached the broker %d times, which holds %d streams, and opened %d entries in the data directory; want none",
			varz.TotalConnections, jsz.Streams, len(opened))
	}
}
