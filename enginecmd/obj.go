package enginecmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

const objUsage = "usage: engine obj put|get|ls|rm [flags]\n"

// objCommand: `engine obj put|get|ls|rm` on the object storage service.
// Objects stream through: neither side holds a whole object in memory.
func (c *command) objCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, objUsage)
		return exitUsage
	}
	switch args[0] {
	case "put":
		return c.objPut(args[1:], stdout, stderr)
	case "get":
		return c.objGet(args[1:], stdout, stderr)
	case "ls":
		return c.objList(args[1:], stdout, stderr)
	case "rm":
		return c.objRemove(args[1:], stderr)
	}
	fmt.Fprintf(stderr, "engine obj: unknown command %q\n%s", args[0], objUsage)
	return exitUsage
}

func objects(svc app.Services) (ports.ObjectStorage, error) {
	if svc.ObjectStorage == nil {
		return nil, switchedOff(ports.ServiceObjectStorage)
	}
	return svc.ObjectStorage, nil
}

// objJSON is an object's description as JSON prints it.
type objJSON struct {
	Key         string    `json:"key"`
	Size        int64     `json:"size"`
	ETag        string    `json:"etag,omitempty"`
	ContentType string    `json:"content_type,omitempty"`
	Modified    time.Time `json:"modified,omitzero"`
}

func (c *command) objPut(args []string, stdout, stderr io.Writer) int {
	fs, cf := newFlags("obj put", "obj put KEY [FILE|-] [flags] (no FILE or -: read stdin)", true, false)
	contentType := fs.String("content-type", "", "the object's content type")
	pos, code, ok := parseArgs(fs, cf, args, stderr, 1, 2)
	if !ok {
		return code
	}
	if code, ok := checkArgs(fs, stderr, storecheck.Key("KEY", pos[0])); !ok {
		return code
	}
	key := pos[0]
	src, name := os.Stdin, "stdin"
	if len(pos) == 2 && pos[1] != "-" {
		f, err := os.Open(pos[1])
		if err != nil {
			return fail(stderr, err)
		}
		defer f.Close()
		src, name = f, pos[1]
	}
	// The size, when the source has one, sizes the bar; a pipe has none.
	// A directory opens as a file does, and only its first read fails: it
	// is refused here, before an engine starts and perhaps claims the
	// lease for nothing.
	var size int64
	if fi, err := src.Stat(); err == nil && fi.Mode().IsRegular() {
		size = fi.Size()
	} else if err == nil && fi.IsDir() {
		return fail(stderr, fmt.Errorf("obj put: %s is a directory, want a file", name))
	}
	return c.withEngine(cf, stderr, ports.ServiceObjectStorage, func(ctx context.Context, svc app.Services) error {
		store, err := objects(svc)
		if err != nil {
			return err
		}
		bar := newProgress(stderr, "put "+lineSafe(key), size)
		in := &countingReader{r: interruptibleReader(ctx, src)}
		info, err := store.Put(ctx, key, bar.reader(in), ports.PutObjectOptions{ContentType: *contentType})
		bar.finish()
		if err != nil {
			err = fmt.Errorf("put %q from %s: %w", key, name, err)
			if in.n > 0 {
				return touchedError{err}
			}
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s: %d bytes, etag %s\n", lineSafe(info.Key), info.Size, lineSafe(info.ETag))
		return err
	})
}

func (c *command) objGet(args []string, stdout, stderr io.Writer) int {
	fs, cf := newFlags("obj get", "obj get KEY [FILE|-] [flags] (no FILE or -: write to stdout)", true, false)
	pos, code, ok := parseArgs(fs, cf, args, stderr, 1, 2)
	if !ok {
		return code
	}
	if code, ok := checkArgs(fs, stderr, storecheck.Key("KEY", pos[0])); !ok {
		return code
	}
	key := pos[0]
	path := ""
	if len(pos) == 2 && pos[1] != "-" {
		path = pos[1]
		// A directory can never take the object: refused before an engine
		// starts, as obj put refuses one to read.
		if fi, err := os.Stat(path); err == nil && fi.IsDir() {
			return fail(stderr, fmt.Errorf("obj get: %s is a directory, want a file", path))
		}
		// Nor can a file whose directory is missing or is no directory.
		if dir := filepath.Dir(path); dir != "" {
			if fi, err := os.Stat(dir); err != nil {
				return fail(stderr, fmt.Errorf("obj get: %s: %w", path, err))
			} else if !fi.IsDir() {
				return fail(stderr, fmt.Errorf("obj get: %s: %s is not a directory", path, dir))
			}
		}
	}
	return c.withEngine(cf, stderr, ports.ServiceObjectStorage, func(ctx context.Context, svc app.Services) error {
		store, err := objects(svc)
		if err != nil {
			return err
		}
		body, info, err := store.Get(ctx, key, ports.GetObjectOptions{})
		if errors.Is(err, ports.ErrNotFound) {
			return fmt.Errorf("object %q not found", key)
		}
		if err != nil {
			return err
		}
		defer body.Close()
		if path == "" {
			return copyObject(ctx, stdout, body, key, info.Size, stderr)
		}
		out, err := openTarget(ctx, path)
		if err != nil {
			return fmt.Errorf("get %q: %w", key, err)
		}
		err = copyObject(ctx, out.f, body, key, info.Size, stderr)
		return out.finish(err)
	})
}

// copyObject copies an object of size bytes to dst, with a progress bar,
// until ctx ends.
func copyObject(ctx context.Context, dst io.Writer, body io.Reader, key string, size int64, stderr io.Writer) error {
	bar := newProgress(stderr, "get "+lineSafe(key), size)
	n, err := io.Copy(interruptibleWriter(ctx, dst), bar.reader(body))
	bar.finish()
	if err == nil && n != size {
		err = fmt.Errorf("read %d of its %d bytes", n, size)
	}
	if err != nil {
		err = fmt.Errorf("get %q: %w", key, err)
		if n > 0 {
			return touchedError{err}
		}
		return err
	}
	return nil
}

// countingReader counts what r yields.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// target is the file a download writes. A download that fails must leave
// what was there: a file half written would pass for the object, and one
// the download replaced would be gone. So a new file is removed, an
// existing regular file is replaced only once the object is whole (it is
// written beside it and renamed over it), and anything else, such as
// /dev/null or a pipe, is written as it is and never removed.
type target struct {
	f *os.File
	// final is the path renamed over on success, "" when f is the path
	// itself; remove is the file to remove on failure, "" for none.
	final, remove string
}

// openTarget is createTarget until ctx ends. Opening a FIFO to write
// blocks until a reader opens it, for as long as another process pleases,
// and the open ignores the command's context: a signal ended nothing, and
// a command that served held the lease meanwhile. The open given up goes
// on in a goroutine of its own, which closes what it opened, and removes
// what it made, should the open ever return.
func openTarget(ctx context.Context, path string) (*target, error) {
	type opened struct {
		t   *target
		err error
	}
	done := make(chan opened, 1)
	go func() {
		t, err := createTarget(path)
		done <- opened{t, err}
	}()
	select {
	case o := <-done:
		return o.t, o.err
	case <-ctx.Done():
		go func() {
			if o := <-done; o.err == nil {
				_ = o.t.finish(ctx.Err())
			}
		}()
		return nil, ctx.Err()
	}
}

func createTarget(path string) (*target, error) {
	// A link to a regular file is replaced where it points, so the link
	// stays one.
	resolved := path
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		if r, err := filepath.EvalSymlinks(path); err == nil {
			resolved = r
		}
	}
	fi, err := os.Stat(resolved)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
		if err != nil {
			return nil, err
		}
		return &target{f: f, remove: path}, nil
	case err != nil:
		return nil, err
	case fi.Mode().IsRegular():
		// A file the download may not write is refused as before, not
		// replaced.
		w, err := os.OpenFile(resolved, os.O_WRONLY, 0)
		if err != nil {
			return nil, err
		}
		_ = w.Close()
		f, err := os.CreateTemp(filepath.Dir(resolved), "."+filepath.Base(resolved)+".*.part")
		if err != nil {
			return nil, err
		}
		if err := f.Chmod(fi.Mode().Perm()); err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
			return nil, err
		}
		return &target{f: f, final: resolved, remove: f.Name()}, nil
	case fi.IsDir():
		return nil, fmt.Errorf("%s is a directory", path)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	return &target{f: f}, nil
}

// finish closes the file after a download that ended with err, and puts
// it in place, or removes what the download made.
func (t *target) finish(err error) error {
	if err == nil && t.final != "" {
		err = t.f.Sync()
	}
	if cerr := t.f.Close(); err == nil {
		err = cerr
	}
	if err == nil && t.final != "" {
		err = os.Rename(t.f.Name(), t.final)
	}
	if err != nil && t.remove != "" {
		_ = os.Remove(t.remove)
	}
	return err
}

func (c *command) objList(args []string, stdout, stderr io.Writer) int {
	fs, cf := newFlags("obj ls", "obj ls [PREFIX] [flags]", true, true)
	limit := fs.Int("limit", 0, "list at most this many objects (0: all)")
	pos, code, ok := parseArgs(fs, cf, args, stderr, 0, 1)
	if !ok {
		return code
	}
	if *limit < 0 {
		fmt.Fprintf(stderr, "engine obj ls: --limit is %d, want 0 or more\n", *limit)
		return exitUsage
	}
	prefix := ""
	if len(pos) == 1 {
		prefix = pos[0]
	}
	if code, ok := checkArgs(fs, stderr, storecheck.Prefix("PREFIX", prefix)); !ok {
		return code
	}
	return c.withEngine(cf, stderr, ports.ServiceObjectStorage, func(ctx context.Context, svc app.Services) error {
		stdout := interruptibleWriter(ctx, stdout)
		store, err := objects(svc)
		if err != nil {
			return err
		}
		list := []objJSON{}
		for cursor := ""; ; {
			page, next, err := store.List(ctx, prefix, 0, cursor)
			if err != nil {
				return err
			}
			for _, o := range page {
				list = append(list, objJSON{Key: o.Key, Size: o.Size, ETag: o.ETag, ContentType: o.ContentType, Modified: o.Modified.UTC()})
			}
			if next == "" || *limit > 0 && len(list) >= *limit {
				break
			}
			cursor = next
		}
		if *limit > 0 && len(list) > *limit {
			list = list[:*limit]
		}
		if cf.json() {
			return writeJSON(stdout, map[string][]objJSON{"objects": list})
		}
		// Size and time are of fixed width, so the key, last, may hold spaces.
		for _, o := range list {
			if _, err := fmt.Fprintf(stdout, "%12d  %s  %s\n", o.Size, o.Modified.Format(time.RFC3339), lineSafe(o.Key)); err != nil {
				return err
			}
		}
		return nil
	})
}

func (c *command) objRemove(args []string, stderr io.Writer) int {
	fs, cf := newFlags("obj rm", "obj rm KEY [flags]", true, false)
	pos, code, ok := parseArgs(fs, cf, args, stderr, 1, 1)
	if !ok {
		return code
	}
	if code, ok := checkArgs(fs, stderr, storecheck.Key("KEY", pos[0])); !ok {
		return code
	}
	key := pos[0]
	return c.withEngine(cf, stderr, ports.ServiceObjectStorage, func(ctx context.Context, svc app.Services) error {
		store, err := objects(svc)
		if err != nil {
			return err
		}
		err = store.Delete(ctx, key)
		if errors.Is(err, ports.ErrNotFound) {
			return fmt.Errorf("object %q not found", key)
		}
		return err
	})
}
