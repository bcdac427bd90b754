// Package enginetest builds the engine command for tests and tools that
// run it as a real process: where a crash or a signal matters, the engine
// under test is the binary operators run.
package enginetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Package is the engine command's import path.
const Package = "github.com/abi-engine/engine/cmd/engine"

// Build compiles the engine command into dir and returns the binary's path.
func Build(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "engine")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, Package).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build %s: %w\n%s", Package, err, out)
	}
	return bin, nil
}

// Main is a TestMain body: it builds the engine into a temporary directory,
// sets *bin to it, runs the tests and removes the directory.
func Main(m *testing.M, bin *string) int {
	dir, err := os.MkdirTemp("", "engine-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if *bin, err = Build(context.Background(), dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}
