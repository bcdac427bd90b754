package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// A value piped into kv set or doc put is read up to the largest value a
// call carries, 256 MiB, and refused past it before any engine is sought,
// so a pipe sent by mistake, such as /dev/zero, never fills the
// operator's memory. Before, the command read all of it, and only then
// went on to the engine, which refuses such a value whole.
func TestAValuePipedPastTheLargestACallCarriesIsRefusedBeforeAnEngineIsSought(t *testing.T) {
	config := filepath.Join(t.TempDir(), "engine.yaml")
	if err := os.WriteFile(config, []byte("nats:\n  url: nats://127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const past = 256<<20 + 1
	for _, args := range [][]string{{"kv", "set", "k"}, {"doc", "put", "c", "d", "-"}} {
		r := cli(t, io.LimitReader(zeros{}, past), append(args, "--config", config)...)
		if r.code != 1 || !strings.Contains(r.stderr, "stdin holds more than 256 MiB") {
			t.Errorf("engine %s with %d bytes on stdin = %d\nstderr: %s\nwant 1, refusing the value by its size", strings.Join(args, " "), past, r.code, r.stderr)
		}
	}
}
