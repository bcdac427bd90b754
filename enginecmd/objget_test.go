package enginecmd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	objmemory "github.com/abi-engine/engine/adapters/secondary/objectstorage/memory"
	"github.com/abi-engine/engine/adapters/secondary/storage"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// breakingObjects is an object store, shared by every engine the commands
// start, whose reads of the object "breaks" fail after its first bytes.
type breakingObjects struct{ *objmemory.Store }

func (breakingObjects) Close() error { return nil }

var sharedObjects, _ = objmemory.Open(context.Background(), objmemory.Config{})

type breakingObjectsConfig struct{}

func (breakingObjectsConfig) LocalStorage() string { return "" }

func (b breakingObjects) Get(ctx context.Context, key string, opts ports.GetObjectOptions) (io.ReadCloser, ports.ObjectInfo, error) {
	r, info, err := b.Store.Get(ctx, key, opts)
	if err != nil || key != "breaks" {
		return r, info, err
	}
	return struct {
		io.Reader
		io.Closer
	}{io.MultiReader(io.LimitReader(r, 3), failing{}), r}, info, nil
}

type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, errors.New("the disk under the object failed") }

func init() {
	storage.Register(ports.ServiceObjectStorage, "breaking", func(_ context.Context, _ breakingObjectsConfig) (breakingObjects, error) {
		return breakingObjects{sharedObjects}, nil
	})
}

// A download into a file that fails part way leaves the file as it was:
// an existing file keeps its content, a link to one stays a link to it
// unchanged, and a new file is not left behind. Before, the file was
// truncated as the download began and removed when it failed, so a failed
// `obj get` destroyed the file it was to replace, and removed a link, or a
// device such as /dev/null, named as the file. A download that succeeds
// replaces the content and keeps the file's mode.
func TestAFailedObjectGetLeavesTheFileItWouldReplace(t *testing.T) {
	srv := natstest.StartServer(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "engine.yaml")
	yaml := fmt.Sprintf("nats:\n  url: %s\n  engine: {lease_seconds: 1, drain_seconds: 1}\nhttp: {listen: \"off\"}\ndata_dir: %s\n"+
		"services:\n  object_storage: {adapter: breaking}\n  vector_store: {adapter: off}\n",
		srv.ClientURL(), filepath.Join(dir, "data"))
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ABI_ENGINE_ROLE", "")
	for _, key := range []string{"breaks", "whole"} {
		if _, err := sharedObjects.Put(t.Context(), key, strings.NewReader("the object's bytes"), ports.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(key, path string) (int, string) {
		t.Helper()
		var stderr bytes.Buffer
		code := Run([]string{"obj", "get", key, path, "--config", cfg}, io.Discard, &stderr, Options{})
		return code, stderr.String()
	}
	kept := filepath.Join(dir, "kept")
	if err := os.WriteFile(kept, []byte("precious"), 0o640); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(kept, link); err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(dir, "fresh")
	for _, path := range []string{kept, link, fresh} {
		if code, stderr := get("breaks", path); code != exitError || !strings.Contains(stderr, "the disk under the object failed") {
			t.Fatalf("obj get into %s of an object whose read fails: exit %d, stderr %q", path, code, stderr)
		}
	}
	if b, err := os.ReadFile(kept); err != nil || string(b) != "precious" {
		t.Fatalf("after a failed download over it the file holds %q, %v", b, err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("after a failed download into a link the link is %v, %v", fi, err)
	}
	if _, err := os.Stat(fresh); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed download into a new file left it: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 4 { // engine.yaml, data, kept, link
		t.Fatalf("the directory holds %d entries after failed downloads, want 4", len(entries))
	}

	if code, stderr := get("whole", link); code != exitOK {
		t.Fatalf("obj get into a link: exit %d: %s", code, stderr)
	}
	fi, err := os.Lstat(link)
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("a download into a link replaced the link: %v, %v", fi, err)
	}
	if b, err := os.ReadFile(kept); err != nil || string(b) != "the object's bytes" {
		t.Fatalf("a download into a link to the file left it holding %q, %v", b, err)
	}
	if fi, err := os.Stat(kept); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("a download over a file of mode 0640 left it %v, %v", fi, err)
	}
}
