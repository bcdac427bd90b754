package localfs_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/objectstorage/localfs"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/internal/testenv"
	"github.com/abi-engine/engine/ports"
)

// fullDirEnv names the directory, a small file system of its own, that the
// helper process puts into; set, the test binary runs only
// TestHelperPutOntoAFullDisk.
const fullDirEnv = "LOCALFS_TEST_FULL_DIR"

// TestHelperPutOntoAFullDisk is the process that the full disk test runs
// in a mount namespace of its own, on a file system of 128 KiB.
func TestHelperPutOntoAFullDisk(t *testing.T) {
	dir := os.Getenv(fullDirEnv)
	if dir == "" {
		t.Skip("the full disk test's helper process")
	}
	s, err := localfs.Open(context.Background(), localfs.Config{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Put(t.Context(), "big", bytes.NewReader(bytes.Repeat([]byte("b"), 1<<20)), ports.PutObjectOptions{})
	if !errors.Is(err, ports.ErrStorageFull) {
		t.Fatalf("a put of 1 MiB onto a file system of 128 KiB: %v, want ports.ErrStorageFull", err)
	}
	if _, err := s.Stat(t.Context(), "big"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("after the put the disk had no room for, Stat: %v, want ErrNotFound", err)
	}
	if files := putFiles(t, dir); len(files) > 0 {
		t.Fatalf("the put the disk had no room for left %q behind", files)
	}
	if _, err := s.Put(t.Context(), "small", bytes.NewReader([]byte("s")), ports.PutObjectOptions{}); err != nil {
		t.Fatalf("a put of 1 byte after the refused one: %v", err)
	}
	if got := contracttests.ObjectContent(t, s, "small"); got != "s" {
		t.Fatalf("small holds %q, want %q", got, "s")
	}
}

// A put the disk has no room for is ports.ErrStorageFull, which the engine
// answers 507, as the SQLite, PostgreSQL and JetStream stores answer a
// full disk: the caller learns that nothing was written and that the put
// may be taken once room is made, and the partial file is gone, so the
// room it took is free again. Before, it was an internal error (500). The
// disk is a file system of 128 KiB, mounted in a user and mount namespace
// of the helper process's own, which no one else sees; a host that lets
// no process make one skips the test, and fails it where backends are
// required (CI).
func TestAPutTheDiskHasNoRoomForIsStorageFull(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		testenv.Missing(t, "no unshare(1) to make a small file system of the test's own")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const script = `mount -t tmpfs -o size=128k tmpfs "$1" && exec "$2" -test.run='^TestHelperPutOntoAFullDisk$' -test.count=1 -test.v`
	cmd := exec.CommandContext(ctx, unshare, "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh", dir, os.Args[0])
	cmd.Env = append(os.Environ(), fullDirEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil && !bytes.Contains(out, []byte("=== RUN   TestHelperPutOntoAFullDisk")) {
		testenv.Missing(t, "this host lets no test mount a small file system of its own: %v\n%s", err, out)
	}
	if err != nil {
		t.Fatalf("the helper on a full disk failed: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("--- PASS: TestHelperPutOntoAFullDisk")) {
		t.Fatalf("the helper did not run:\n%s", out)
	}
}
