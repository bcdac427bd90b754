// Package localfs stores objects as files under a directory on this host.
//
// A key never becomes a path: each object lives in a file named by the
// SHA-256 of its key, so no key ("../x", "/etc/passwd") can reach outside
// the root. The file holds the content followed by a trailer that records
// the key, ETag, content type and time, so one rename publishes content
// and metadata together. Writes go to a temporary file first; the rename
// happens under a lock file, which makes conditional Puts atomic across
// handles and processes sharing the directory. The lock is flock(2)'s on
// Unix and LockFileEx's on Windows (lock_unix.go, lock_windows.go).
package localfs

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/objectstorage/internal/objkey"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

const (
	objectsDir = "objects"
	tmpDir     = "tmp"
	locksDir   = "locks"
	// lockStripes is how many lock files share the keys: enough that
	// unrelated keys rarely wait on each other, few enough to never grow.
	lockStripes = 256
	// abandonedTemp is how long a temporary file no Put holds must have gone
	// unwritten before Open removes it: a Put locks its file a moment after
	// making it, and a Put of a release before that lock wrote no more
	// than an upload's idle time (seconds) apart.
	abandonedTemp = time.Minute
	// tempPrefix begins the name of every temporary file a Put makes, and
	// of no other file Open removes.
	tempPrefix = "put-"
	// trailerLenSize is the size of the trailer's length field.
	trailerLenSize = 8
	// accountFile holds the NATS account whose engine opened the
	// directory first (ADR 0016).
	accountFile = "account"
)

// Config is the localfs adapter's block under services.object_storage.config.
type Config struct {
	// Path is the directory the objects live under: the store keeps its
	// files in objects/, tmp/ and locks/ there, and its account in the
	// file account, and touches nothing else.
	Path string `yaml:"path"`
}

// LocalStorage implements ports.StorageConfig: the files stay on this host.
func (c Config) LocalStorage() string { return "files under " + c.Path }

// Default puts an empty Path at objects under the data directory, written so
// it reads as the user wrote the directory ("./.engine/objects").
func (c *Config) Default(dataDir string) {
	if c.Path == "" {
		c.Path = strings.TrimRight(dataDir, "/") + "/objects"
	}
}

// Store keeps objects under one directory. Several stores, in this process
// or others, may share the directory.
type Store struct {
	root string
	// turns holds a turn for each lock stripe: the Puts and Deletes of
	// this store wait for their stripe's turn here, where a caller that
	// gives up stops waiting, and only the one whose turn it is asks for
	// the stripe's lock file, which another process at most holds.
	turns [lockStripes]chan struct{}
}

var (
	_ ports.ObjectStorage = (*Store)(nil)
	_ ports.Expirer       = (*Store)(nil)
)

// trailer is the metadata stored after an object's content.
type trailer struct {
	Key         string    `json:"key"`
	ETag        string    `json:"etag"`
	ContentType string    `json:"content_type"`
	Modified    time.Time `json:"modified"`
}

// Open checks the config, creates the directories and removes temporary
// files that crashed Puts left behind (put-* in tmp/ that no Put holds),
// and no other file. Opened under a serving engine's account
// (ports.WithAccount), the directory must belong to that account, or come
// to (belong).
func Open(ctx context.Context, c Config) (*Store, error) {
	if c.Path == "" {
		return nil, fmt.Errorf("object_storage.config.path is empty: %w", ports.ErrInvalidArgument)
	}
	s := &Store{root: c.Path}
	for i := range s.turns {
		s.turns[i] = make(chan struct{}, 1)
	}
	for _, d := range []string{objectsDir, tmpDir, locksDir} {
		if err := os.MkdirAll(filepath.Join(c.Path, d), 0o755); err != nil {
			return nil, fmt.Errorf("object_storage.config.path %q: %w", c.Path, err)
		}
	}
	if err := belong(ctx, c.Path); err != nil {
		return nil, err
	}
	if _, err := s.DeleteExpired(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// DeleteExpired implements ports.Expirer: it removes the temporary files
// that Puts cut short left behind (put-* in tmp/ that no Put holds), as
// Open does, and says how many. Open alone is not enough: engines share
// the directory, a standby beside the serving engine or the old release
// beside the new during a deploy, and a Put of one that dies after the
// other opened the store left its file for as long as that one ran. The
// serving engine's sweep job removes it within minutes.
func (s *Store) DeleteExpired(ctx context.Context) (int, error) {
	dir := filepath.Join(s.root, tmpDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("read %q: %w", dir, err)
	}
	removed := 0
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return removed, fmt.Errorf("sweep %q: %w", dir, err)
		}
		// Only a Put's own files: the directory is the operator's, and
		// what else is in tmp/ is none of the store's business.
		if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), tempPrefix) {
			continue
		}
		if removeAbandoned(filepath.Join(dir, e.Name())) {
			removed++
		}
	}
	return removed, nil
}

// removeAbandoned removes a Put's temporary file unless a Put holds it,
// and says whether it did: a Put holds a lock on its file as long as it
// runs, and the system lets go of it when the process dies, so a file
// nobody holds was left by a Put that a crash cut short, once it has gone
// unwritten for abandonedTemp. It is removed under the lock, so no Put
// takes the file meanwhile.
func removeAbandoned(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer closeLocked(f)
	if err := tryLock(f, true); err != nil {
		return false // held by a running Put, or not to be locked: left alone
	}
	st, err := f.Stat()
	if err != nil || time.Since(st.ModTime()) <= abandonedTemp {
		return false
	}
	return os.Remove(path) == nil
}

// belong makes the directory belong to the account ctx's source names, as
// a SQLite file does (sqlitedb.Belong): the objects of one account's
// engines are no other account's to serve. A directory that belongs to
// none adopts it; one that belongs to another is refused, naming both
// accounts and the directory. The account is written whole to a temporary
// file and linked into place, which fails if a file is there already, so
// two engines opening a new directory never both adopt it and neither
// reads half a name. Without a source in ctx (a tool, a test) it does
// nothing.
func belong(ctx context.Context, root string) error {
	source, ok := ports.Account(ctx)
	if !ok {
		return nil
	}
	account, err := source(ctx)
	if err != nil {
		return fmt.Errorf("object_storage localfs: %s keeps the objects of one NATS account, and this engine's is unknown: %w", root, err)
	}
	path := filepath.Join(root, accountFile)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		if err := adopt(root, path, account); err != nil {
			return err
		}
	}
	owner, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("object_storage localfs: read the account of %s: %w", root, err)
	}
	if string(owner) != account {
		return fmt.Errorf("object_storage localfs: %s belongs to NATS account %q, and this engine serves account %q; engines of two accounts must not share a data_dir",
			root, owner, account)
	}
	return nil
}

// adopt writes account into path unless a file is there already.
func adopt(root, path, account string) error {
	tmp, err := os.CreateTemp(filepath.Join(root, tmpDir), tempPrefix+"account-")
	if err != nil {
		return fmt.Errorf("object_storage localfs: record the account of %s: %w", root, err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(account)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp.Name(), path)
	}
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("object_storage localfs: record the account of %s: %w", root, err)
	}
	return nil
}

// Close releases nothing: every call opens and closes its own files.
func (s *Store) Close() error { return nil }

func (s *Store) hashName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// isObjectName reports whether name is one hashName makes: 64 lowercase
// hex digits.
func isObjectName(name string) bool {
	if len(name) != hex.EncodedLen(sha256.Size) {
		return false
	}
	for _, c := range []byte(name) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func (s *Store) path(key string) string {
	return filepath.Join(s.root, objectsDir, s.hashName(key))
}

// lock takes the lock file of key's stripe and returns its release. It
// waits no longer than ctx, and leaves nothing waiting once it returns:
// the holder may be another engine on this host, paused while it holds
// the lock, and a call blocked in the system's wait for a lock holds a
// thread that no caller giving up frees. So this store's calls take their
// stripe's turn first (turns), and the one whose turn it is asks for the
// file's lock without blocking, again and again, more slowly each time,
// up to lockPoll apart, until it has it or ctx ends.
func (s *Store) lock(ctx context.Context, key string) (func(), error) {
	stripe := s.hashName(key)[:2]
	name := filepath.Join(s.root, locksDir, stripe)
	n, err := strconv.ParseUint(stripe, 16, 8)
	if err != nil {
		return nil, fmt.Errorf("lock %q: %w", name, err)
	}
	turn := s.turns[n]
	select {
	case turn <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("lock %q: %w", name, ctx.Err())
	}
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		<-turn
		return nil, fmt.Errorf("open lock %q: %w", name, err)
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			closeLocked(f)
			<-turn
		})
	}
	wait := time.Millisecond
	for {
		err = tryLock(f, true)
		if !heldElsewhere(err) {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			release()
			return nil, fmt.Errorf("lock %q: %w", name, ctx.Err())
		}
		wait = min(2*wait, lockPoll)
	}
	if err != nil {
		release()
		return nil, fmt.Errorf("lock %q: %w", name, err)
	}
	return release, nil
}

// lockPoll is the longest a call waits between two asks for a lock file
// that another process holds.
const lockPoll = 50 * time.Millisecond

// ctxReader stops a copy when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (r ctxReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}

// copyBuffers hold what a Put copies into its file, a transfer's whole
// chunk at a time (256 KiB). With io.Copy's 32 KiB, every eighth of a
// chunk took a write and a turn of the pipe that feeds the Put, and a
// 64 MiB Put ran at about 0.8 of the speed (BenchmarkPut).
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// Put implements ports.ObjectStorage. A Put the disk has no room for, at
// whichever step, is ports.ErrStorageFull (full): its temporary file is
// removed and nothing is published.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, opts ports.PutObjectOptions) (_ ports.ObjectInfo, err error) {
	defer func() { err = full(err) }()
	if err := objkey.CheckPut(key, opts); err != nil {
		return ports.ObjectInfo{}, err
	}
	tmp, err := s.createTemp()
	if err != nil {
		return ports.ObjectInfo{}, fmt.Errorf("put %q: %w", key, err)
	}
	published := false
	defer func() {
		closeLocked(tmp)
		if !published {
			os.Remove(tmp.Name())
		}
	}()
	sum := sha256.New()
	buf := copyBuffers.Get().(*[]byte)
	size, err := io.CopyBuffer(io.MultiWriter(tmp, sum), ctxReader{ctx, r}, *buf)
	copyBuffers.Put(buf)
	if err != nil {
		return ports.ObjectInfo{}, fmt.Errorf("put %q: write: %w", key, err)
	}
	t := trailer{Key: key, ETag: hex.EncodeToString(sum.Sum(nil)), ContentType: opts.ContentType, Modified: time.Now().UTC()}
	if t.ContentType == "" {
		t.ContentType = objkey.DefaultContentType
	}
	if err := writeTrailer(tmp, t); err != nil {
		return ports.ObjectInfo{}, fmt.Errorf("put %q: %w", key, err)
	}
	if err := tmp.Sync(); err != nil {
		return ports.ObjectInfo{}, fmt.Errorf("put %q: sync: %w", key, err)
	}
	unlock, err := s.lock(ctx, key)
	if err != nil {
		return ports.ObjectInfo{}, fmt.Errorf("put %q: %w", key, err)
	}
	defer unlock()
	if err := s.checkCondition(key, opts); err != nil {
		return ports.ObjectInfo{}, err
	}
	// The last moment to give up: a Put whose caller has, a fenced
	// engine's above all, publishes nothing. The copy heeds ctx only
	// while it reads, and the sync and the lock may take long after.
	if err := ctx.Err(); err != nil {
		return ports.ObjectInfo{}, fmt.Errorf("put %q: %w", key, err)
	}
	if err := os.Rename(tmp.Name(), s.path(key)); err != nil {
		return ports.ObjectInfo{}, fmt.Errorf("put %q: %w", key, err)
	}
	published = true
	syncDir(filepath.Join(s.root, objectsDir))
	return info(t, size), nil
}

// full marks err, a Put's, as ports.ErrStorageFull when the file system
// had no room for it (ENOSPC) or the user's quota none (EDQUOT); any other
// error is returned as it is.
func full(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("%w: %w", ports.ErrStorageFull, err)
	}
	return err
}

// createTemp makes a Put's temporary file and locks it until it is closed,
// so that Open, in this process or another, tells it from one a crashed
// Put left (removeAbandoned). The lock is not waited for: an Open may hold
// it, having found the file the moment it was made, and be paused there.
// Such a file is removed, and another made.
func (s *Store) createTemp() (*os.File, error) {
	for try := 1; ; try++ {
		f, err := os.CreateTemp(filepath.Join(s.root, tmpDir), tempPrefix+"*")
		if err != nil {
			return nil, err
		}
		err = tryLock(f, false)
		if err == nil {
			return f, nil
		}
		f.Close()
		os.Remove(f.Name())
		if !heldElsewhere(err) || try == 3 {
			return nil, fmt.Errorf("lock %q: %w", f.Name(), err)
		}
	}
}

// checkCondition runs under the key's lock, so nothing changes the object
// between the check and the rename that follows it.
func (s *Store) checkCondition(key string, opts ports.PutObjectOptions) error {
	if !opts.IfAbsent && opts.IfMatch == "" {
		return nil
	}
	cur, err := s.Stat(context.Background(), key)
	switch {
	case errors.Is(err, ports.ErrNotFound):
		if opts.IfMatch != "" {
			return fmt.Errorf("put %q if ETag is %q: the object is missing: %w", key, opts.IfMatch, ports.ErrConflict)
		}
		return nil
	case err != nil:
		return err
	case opts.IfAbsent:
		return fmt.Errorf("put %q if absent: the object exists: %w", key, ports.ErrConflict)
	case cur.ETag != opts.IfMatch:
		return fmt.Errorf("put %q if ETag is %q: it is %q: %w", key, opts.IfMatch, cur.ETag, ports.ErrConflict)
	}
	return nil
}

// syncDir makes a rename durable; a failure only weakens durability, the
// rename itself has happened, so it is not reported.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

func writeTrailer(w io.Writer, t trailer) error {
	b, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("encode trailer: %w", err)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(len(b)))
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("write trailer: %w", err)
	}
	return nil
}

// readTrailer returns an object file's trailer and the size of its content.
func readTrailer(f *os.File) (trailer, int64, error) {
	st, err := f.Stat()
	if err != nil {
		return trailer{}, 0, err
	}
	var n [trailerLenSize]byte
	if st.Size() < trailerLenSize {
		return trailer{}, 0, fmt.Errorf("object file %q is too short for its trailer", f.Name())
	}
	if _, err := f.ReadAt(n[:], st.Size()-trailerLenSize); err != nil {
		return trailer{}, 0, fmt.Errorf("read trailer of %q: %w", f.Name(), err)
	}
	tlen := int64(binary.BigEndian.Uint64(n[:]))
	size := st.Size() - trailerLenSize - tlen
	if tlen < 0 || size < 0 {
		return trailer{}, 0, fmt.Errorf("object file %q has a trailer of %d bytes in %d", f.Name(), tlen, st.Size())
	}
	b := make([]byte, tlen)
	if _, err := f.ReadAt(b, size); err != nil {
		return trailer{}, 0, fmt.Errorf("read trailer of %q: %w", f.Name(), err)
	}
	var t trailer
	if err := json.Unmarshal(b, &t); err != nil {
		return trailer{}, 0, fmt.Errorf("decode trailer of %q: %w", f.Name(), err)
	}
	return t, size, nil
}

func info(t trailer, size int64) ports.ObjectInfo {
	return ports.ObjectInfo{Key: t.Key, Size: size, ETag: t.ETag, ContentType: t.ContentType, Modified: t.Modified}
}

// open opens the key's file; the open file keeps this version readable
// even if a Put replaces it meanwhile.
func (s *Store) open(key string) (*os.File, trailer, int64, error) {
	f, err := os.Open(s.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, trailer{}, 0, fmt.Errorf("object %q: %w", key, ports.ErrNotFound)
	}
	if err != nil {
		return nil, trailer{}, 0, fmt.Errorf("object %q: %w", key, err)
	}
	t, size, err := readTrailer(f)
	if err != nil {
		f.Close()
		return nil, trailer{}, 0, fmt.Errorf("object %q: %w", key, err)
	}
	return f, t, size, nil
}

// section reads a range of an open object file and closes it.
type section struct {
	*io.SectionReader
	f *os.File
}

func (s section) Close() error { return s.f.Close() }

// Get implements ports.ObjectStorage.
func (s *Store) Get(_ context.Context, key string, opts ports.GetObjectOptions) (io.ReadCloser, ports.ObjectInfo, error) {
	if err := objkey.CheckGet(key, opts); err != nil {
		return nil, ports.ObjectInfo{}, err
	}
	f, t, size, err := s.open(key)
	if err != nil {
		return nil, ports.ObjectInfo{}, err
	}
	offset, length, err := objkey.Span(key, opts, size)
	if err != nil {
		f.Close()
		return nil, ports.ObjectInfo{}, err
	}
	return section{io.NewSectionReader(f, offset, length), f}, info(t, size), nil
}

// Stat implements ports.ObjectStorage.
func (s *Store) Stat(_ context.Context, key string) (ports.ObjectInfo, error) {
	if err := objkey.Check(key); err != nil {
		return ports.ObjectInfo{}, err
	}
	f, t, size, err := s.open(key)
	if err != nil {
		return ports.ObjectInfo{}, err
	}
	f.Close()
	return info(t, size), nil
}

// Delete implements ports.ObjectStorage.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := objkey.Check(key); err != nil {
		return err
	}
	unlock, err := s.lock(ctx, key)
	if err != nil {
		return fmt.Errorf("delete %q: %w", key, err)
	}
	defer unlock()
	// As a Put before it publishes: the lock may have been long in coming,
	// and a Delete whose caller has given up, a fenced engine's above all,
	// removes nothing.
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete %q: %w", key, err)
	}
	err = os.Remove(s.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %q: %w", key, ports.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("delete %q: %w", key, err)
	}
	syncDir(filepath.Join(s.root, objectsDir))
	return nil
}

var _ ports.ConditionalObjectDeleter = (*Store)(nil)

// DeleteIfMatch implements ports.ConditionalObjectDeleter: it reads the
// ETag and removes the file under the key's lock file, which every Put
// holds to publish and every Delete to remove, in any process sharing the
// directory.
func (s *Store) DeleteIfMatch(ctx context.Context, key, etag string) (bool, error) {
	if err := objkey.CheckDeleteIfMatch(key, etag); err != nil {
		return false, err
	}
	unlock, err := s.lock(ctx, key)
	if err != nil {
		return false, fmt.Errorf("delete %q if the ETag is %q: %w", key, etag, err)
	}
	defer unlock()
	// As Delete: a caller that gave up while the lock was in coming
	// removes nothing.
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("delete %q if the ETag is %q: %w", key, etag, err)
	}
	cur, err := s.Stat(ctx, key)
	if errors.Is(err, ports.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("delete %q if the ETag is %q: %w", key, etag, err)
	}
	if cur.ETag != etag {
		return false, nil
	}
	err = os.Remove(s.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("delete %q if the ETag is %q: %w", key, etag, err)
	}
	syncDir(filepath.Join(s.root, objectsDir))
	return true, nil
}

// List implements ports.ObjectStorage. File names say nothing of the
// keys, so List reads every trailer: fine for a store on one host, whose
// objects number in the thousands, not millions. The cursor is the last key
// of the previous page.
func (s *Store) List(ctx context.Context, prefix string, limit int, cursor string) ([]ports.ObjectInfo, string, error) {
	limit, err := storecheck.Limit("limit", limit)
	if err != nil {
		return nil, "", err
	}
	if err := objkey.CheckList(prefix, cursor); err != nil {
		return nil, "", err
	}
	dir := filepath.Join(s.root, objectsDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, "", fmt.Errorf("list %q: %w", prefix, err)
	}
	var infos []ports.ObjectInfo
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, "", fmt.Errorf("list %q: %w", prefix, err)
		}
		// An object is a file named by its key's hash. Anything else was
		// put there by someone other than a Put (a .DS_Store, an NFS
		// client's .nfsXXXX) and is no object: read as one, it would fail
		// every listing.
		if !e.Type().IsRegular() || !isObjectName(e.Name()) {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted since the directory was read
		}
		if err != nil {
			return nil, "", fmt.Errorf("list %q: %w", prefix, err)
		}
		t, size, err := readTrailer(f)
		f.Close()
		if err != nil {
			return nil, "", fmt.Errorf("list %q: %w", prefix, err)
		}
		// A key stored before keys were held to objkey.Check (one with a
		// NUL) is left out: no call reaches it, and as a page's last key
		// it would be a cursor the next List refuses.
		if strings.HasPrefix(t.Key, prefix) && t.Key > cursor && objkey.Check(t.Key) == nil {
			infos = append(infos, info(t, size))
		}
	}
	slices.SortFunc(infos, func(a, b ports.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	if len(infos) <= limit {
		return infos, "", nil
	}
	return infos[:limit], infos[limit-1].Key, nil
}
