package localfs_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/objectstorage/localfs"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

func open(t *testing.T, dir string) *localfs.Store {
	t.Helper()
	store, err := localfs.Open(t.Context(), localfs.Config{Path: dir})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

func TestObjectStorageContract(t *testing.T) {
	t.Run("localfs", func(t *testing.T) {
		contracttests.RunObjectStorage(t, contracttests.HarnessFunc[ports.ObjectStorage](func(t *testing.T) func(*testing.T) ports.ObjectStorage {
			dir := t.TempDir()
			// Each handle is a store of its own on the shared directory, as
			// two engines on one host would be.
			return func(t *testing.T) ports.ObjectStorage { return open(t, dir) }
		}), contracttests.ObjectStorageCapabilities{ConditionalPut: true, PathLikeKeys: true, NestedKeys: true, Linearizable: true})
	})
}

// Keys that name paths outside the root must leave every file inside it.
func TestKeysStayUnderTheRoot(t *testing.T) {
	parent := t.TempDir()
	root := filepath.Join(parent, "root")
	s := open(t, root)
	for _, key := range []string{"../x", "../../escape", "/abs", "a/../../b", "..", ".", strings.Repeat("../", 300)} {
		if _, err := s.Put(t.Context(), key, strings.NewReader(key), ports.PutObjectOptions{}); err != nil {
			t.Fatalf("Put %q: %v", key, err)
		}
	}
	err := filepath.WalkDir(parent, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != parent && path != root && !strings.HasPrefix(path, root+string(filepath.Separator)) {
			t.Errorf("a Put created %q outside the root %q", path, root)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk: %v", err)
	}
	if entries, err := os.ReadDir(filepath.Join(root, "tmp")); err != nil || len(entries) != 0 {
		t.Fatalf("temporary files left after the Puts: %v (%v)", entries, err)
	}
}

func TestOpenNeedsAPath(t *testing.T) {
	_, err := localfs.Open(t.Context(), localfs.Config{})
	if !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), "path") {
		t.Fatalf("Open without a path: err %v, want ErrInvalidArgument naming path", err)
	}
	if got := (localfs.Config{Path: ".engine/objects"}).LocalStorage(); got != "files under .engine/objects" {
		t.Fatalf("LocalStorage is %q", got)
	}
}
