package localfs_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/objectstorage/localfs"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

func open(t testing.TB, dir string) *localfs.Store {
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

// Open clears away the temporary files crashed Puts left, and only those:
// the path is the operator's directory, and a tmp directory under it may
// hold files of their own (path: /srv/data, whose tmp/ another program
// uses; path: /, whose tmp/ is the host's). Before, every file there older
// than a day was removed at each open, whoever had put it there.
func TestOpenRemovesOnlyTheStaleFilesOfItsOwnPuts(t *testing.T) {
	root := t.TempDir()
	tmp := filepath.Join(root, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-48 * time.Hour)
	for _, name := range []string{"put-1234", "notes.txt", "report.pdf"} {
		p := filepath.Join(tmp, name)
		if err := os.WriteFile(p, []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	open(t, root)
	if _, err := os.Stat(filepath.Join(tmp, "put-1234")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the stale file of a crashed Put is still there (%v)", err)
	}
	for _, name := range []string{"notes.txt", "report.pdf"} {
		if b, err := os.ReadFile(filepath.Join(tmp, name)); err != nil || string(b) != name {
			t.Errorf("Open removed or changed %s, which no Put made: %q, %v", name, b, err)
		}
	}
}

// endsContext cancels its context as it reaches the end of its data.
type endsContext struct {
	r      io.Reader
	cancel context.CancelFunc
}

func (e endsContext) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF {
		e.cancel()
	}
	return n, err
}

// A Put whose context ends after its data is read, as when the engine is
// fenced while the object is synced, publishes nothing: no object, old or
// new, changes. Before, only the reads heeded the context.
func TestAPutWhoseContextEndsBeforeItPublishesLeavesNothing(t *testing.T) {
	s := open(t, t.TempDir())
	if _, err := s.Put(t.Context(), "k", strings.NewReader("old"), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if _, err := s.Put(ctx, "k", endsContext{strings.NewReader("new"), cancel}, ports.PutObjectOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("a Put whose context ended before it published: %v, want context.Canceled", err)
	}
	r, _, err := s.Get(t.Context(), "k", ports.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got, err := io.ReadAll(r); err != nil || string(got) != "old" {
		t.Fatalf("the object holds %q (%v), want the old one", got, err)
	}
}

// A Delete whose context has ended removes nothing.
func TestADeleteWhoseContextEndedLeavesTheObject(t *testing.T) {
	s := open(t, t.TempDir())
	if _, err := s.Put(t.Context(), "k", strings.NewReader("v"), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.Delete(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a Delete whose context ended: %v, want context.Canceled", err)
	}
	if _, err := s.Stat(t.Context(), "k"); err != nil {
		t.Fatalf("the object after a Delete whose context ended: %v", err)
	}
}

// Objects are files named by the hash of their key; the directory may hold
// other entries no Put made: the .DS_Store a Mac's Finder leaves where the
// operator looked, the .nfsXXXX an NFS client keeps for a file removed
// while open. List must leave them out and list the objects. Before, the
// first such file failed every List of every caller, for good.
func TestAListingSkipsFilesThatAreNoObjects(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	ctx := t.Context()
	for _, k := range []string{"a", "b"} {
		if _, err := s.Put(ctx, k, strings.NewReader(k), ports.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	objects := filepath.Join(dir, "objects")
	if err := os.WriteFile(filepath.Join(objects, ".DS_Store"), []byte("\x00\x00\x00\x01Bud1\x00\x00\x10\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(objects, "lost+found"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A copy of a's file under another name, as an NFS client keeps one.
	sum := sha256.Sum256([]byte("a"))
	b, err := os.ReadFile(filepath.Join(objects, hex.EncodeToString(sum[:])))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(objects, ".nfs0000000000a1b2c300000001"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	infos, next, err := s.List(ctx, "", 10, "")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var keys []string
	for _, info := range infos {
		keys = append(keys, info.Key)
	}
	if strings.Join(keys, ",") != "a,b" || next != "" {
		t.Fatalf("listed %q (next %q), want a and b", keys, next)
	}
}

// A store from before keys were held to have no NUL may hold one such key.
// No call reaches it, and List leaves it out: as the last key of a page it
// would be the cursor, which the next List refuses, and the listing could
// not go past it.
func TestAListingGoesPastAKeyOfAnOlderRelease(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	ctx := t.Context()
	for _, k := range []string{"a", "c"} {
		if _, err := s.Put(ctx, k, strings.NewReader(k), ports.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The file an older release wrote for the key "b\x00": the content,
	// its trailer, and the trailer's length.
	const old = "b\x00"
	trailer, err := json.Marshal(map[string]any{"key": old, "etag": "e", "content_type": "application/octet-stream", "modified": time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	file := binary.BigEndian.AppendUint64(append([]byte("b"), trailer...), uint64(len(trailer)))
	name := sha256.Sum256([]byte(old))
	if err := os.WriteFile(filepath.Join(dir, "objects", hex.EncodeToString(name[:])), file, 0o644); err != nil {
		t.Fatal(err)
	}
	var listed []string
	for cursor, page := "", 0; page < 4; page++ {
		infos, next, err := s.List(ctx, "", 2, cursor)
		if err != nil {
			t.Fatalf("List after the cursor %q the page before gave: %v (listed so far %q)", cursor, err, listed)
		}
		for _, info := range infos {
			listed = append(listed, info.Key)
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	if strings.Join(listed, ",") != "a,c" {
		t.Fatalf("listed %q, want a and c", listed)
	}
}

// The objects directory of a data_dir belongs, like its SQLite files, to
// the NATS account whose engine opened it first (ADR 0016): an engine of
// another account is refused it, naming both accounts and the directory,
// one of the same account opens it again, and a tool, which opens with no
// account, is neither checked nor makes the directory its own.
func TestADirectoryOfAnotherAccountIsRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "objects")
	as := func(account string) error {
		ctx := t.Context()
		if account != "" {
			ctx = ports.WithAccount(ctx, func(context.Context) (string, error) { return account, nil })
		}
		store, err := localfs.Open(ctx, localfs.Config{Path: dir})
		if err != nil {
			return err
		}
		return store.Close()
	}
	if err := as(""); err != nil {
		t.Fatalf("a tool's open: %v", err)
	}
	if err := as("TEAM_A"); err != nil {
		t.Fatalf("the first account's open of a directory a tool made: %v", err)
	}
	err := as("TEAM_B")
	if err == nil {
		t.Fatal("an engine of TEAM_B opened TEAM_A's objects")
	}
	for _, want := range []string{`"TEAM_A"`, `"TEAM_B"`, dir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not name %s", err, want)
		}
	}
	if err := as(""); err != nil {
		t.Fatalf("a tool's open of a directory that belongs to an account: %v", err)
	}
	if err := as("TEAM_A"); err != nil {
		t.Fatalf("the first account's open again: %v", err)
	}
	left, err := os.ReadDir(filepath.Join(dir, "tmp"))
	if err != nil || len(left) != 0 {
		t.Errorf("tmp/ holds %d files after the opens (%v), want none", len(left), err)
	}
}
