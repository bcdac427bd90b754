package localfs_test

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/objectstorage/localfs"
	"github.com/abi-engine/engine/ports"
)

// crashDirEnv names the directory the helper process puts into; set, the
// test binary runs only TestHelperPutThatCrashes, which then never returns.
const crashDirEnv = "LOCALFS_TEST_CRASH_DIR"

// stalls yields a chunk, says so on its channel when asked for the next
// (the chunk is then in the file), and then blocks until its context ends.
type stalls struct {
	ctx     context.Context
	written chan<- struct{}
	reads   int
}

func (s *stalls) Read(p []byte) (int, error) {
	s.reads++
	if s.reads == 1 {
		return copy(p, strings.Repeat("x", len(p))), nil
	}
	if s.reads == 2 {
		close(s.written)
	}
	<-s.ctx.Done()
	return 0, s.ctx.Err()
}

// TestHelperPutThatCrashes is the process the crash test kills: it starts
// a Put, says "writing" once the Put has written to its file, and waits to
// be killed.
func TestHelperPutThatCrashes(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("the crash test's helper process")
	}
	s, err := localfs.Open(context.Background(), localfs.Config{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	written := make(chan struct{})
	go s.Put(context.Background(), "k", &stalls{ctx: context.Background(), written: written}, ports.PutObjectOptions{})
	<-written
	os.Stdout.WriteString("writing\n")
	select {}
}

// putFiles lists the temporary files of Puts under dir.
func putFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "tmp"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "put-") {
			names = append(names, e.Name())
		}
	}
	return names
}

// putKilledMidway runs a Put on dir in a helper process, kills the process
// while the Put is writing, and returns the temporary file it left, checking
// there is exactly one.
func putKilledMidway(ctx context.Context, t *testing.T, dir string) []string {
	t.Helper()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperPutThatCrashes$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "writing\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the helper process said %q (%v), want writing", line, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	crashed := putFiles(t, dir)
	if len(crashed) != 1 {
		t.Fatalf("the killed Put left %q in tmp/, want one file", crashed)
	}
	return crashed
}

// putLeftRunning starts a Put of "live" to live, on dir, writes the first
// part of its value, and leaves it running. It returns the pipe to write the
// rest to, the Put's result to come, and its temporary file, checking it is
// the only one in tmp/ beside the file crashed of a killed Put.
func putLeftRunning(ctx context.Context, t *testing.T, live *localfs.Store, dir, crashed string) (*io.PipeWriter, <-chan error, []string) {
	t.Helper()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := live.Put(ctx, "live", pr, ports.PutObjectOptions{})
		done <- err
	}()
	if _, err := pw.Write([]byte("live ")); err != nil {
		t.Fatal(err)
	}
	var running []string
	for _, name := range putFiles(t, dir) {
		if name != crashed {
			running = append(running, name)
		}
	}
	if len(running) != 1 {
		t.Fatalf("tmp/ holds %q beside the crashed Put's %q, want the running Put's file", running, crashed)
	}
	return pw, done, running
}

// finishLivePut ends the Put putLeftRunning started, which ran across what
// the test did (across), and checks that it stored the whole object.
func finishLivePut(ctx context.Context, t *testing.T, live *localfs.Store, pw *io.PipeWriter, done <-chan error, across string) {
	t.Helper()
	if _, err := pw.Write([]byte("put")); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if err := <-done; err != nil {
		t.Fatalf("the Put that ran across the %s: %v", across, err)
	}
	r, _, err := live.Get(ctx, "live", ports.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got, err := io.ReadAll(r); err != nil || string(got) != "live put" {
		t.Fatalf("the running Put stored %q (%v), want %q", got, err, "live put")
	}
}

// An engine that is killed in the middle of a Put leaves its temporary
// file; the next engine to open the directory removes it once it has not
// been written for a minute, however young, while the file of a Put still
// running, in another store on the directory, stays however old, and that
// Put completes. Before, Open removed only files a day old: an engine
// killed again and again in the middle of large uploads, and restarted
// each time, filled the disk with them within the day.
func TestARestartRemovesTheFileOfAPutACrashCutShort(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	crashed := putKilledMidway(ctx, t, dir)

	// A Put that runs on in a store of this process, written to as long
	// ago as the crashed one.
	live := open(t, dir)
	pw, done, running := putLeftRunning(ctx, t, live, dir, crashed[0])
	past := time.Now().Add(-2 * time.Minute)
	for _, name := range append(crashed, running...) {
		if err := os.Chtimes(filepath.Join(dir, "tmp", name), past, past); err != nil {
			t.Fatal(err)
		}
	}

	open(t, dir)
	if left := putFiles(t, dir); len(left) != 1 || left[0] != running[0] {
		t.Fatalf("after the restart tmp/ holds %q, want only the running Put's %q (the crashed Put's was %q)", left, running[0], crashed[0])
	}
	finishLivePut(ctx, t, live, pw, done, "restart")
	if _, err := live.Stat(ctx, "k"); err == nil {
		t.Fatal("the crashed Put's object is there")
	}
	if left := putFiles(t, dir); len(left) != 0 {
		t.Fatalf("tmp/ holds %q after every Put ended", left)
	}
}

// A Put of another engine on the directory that is killed after this
// store opened, as the old release is during a deploy's overlap or the
// serving engine beside its standby, leaves its temporary file; the
// store's sweep (ports.Expirer, which the serving engine runs every
// minute) removes it once it has gone a minute unwritten, and leaves the
// file of a Put still running in this store, which then completes.
// Before, only Open removed such files, so the one left after the opening
// stayed for as long as the store ran.
func TestTheSweepRemovesTheFileOfAPutKilledAfterTheStoreOpened(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	live := open(t, dir)
	sweeper, ok := any(live).(ports.Expirer)
	if !ok {
		t.Fatal("the store has no sweep (ports.Expirer): the file of a Put killed after it opened stays until the next Open")
	}

	crashed := putKilledMidway(ctx, t, dir)

	pw, done, running := putLeftRunning(ctx, t, live, dir, crashed[0])

	// Swept while young, the killed Put's file stays: a Put that has just
	// made its file may not hold its lock yet.
	if n, err := sweeper.DeleteExpired(ctx); err != nil || n != 0 {
		t.Fatalf("a sweep of files a moment old removed %d (%v), want none", n, err)
	}
	past := time.Now().Add(-2 * time.Minute)
	for _, name := range append(crashed, running...) {
		if err := os.Chtimes(filepath.Join(dir, "tmp", name), past, past); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := sweeper.DeleteExpired(ctx); err != nil || n != 1 {
		t.Fatalf("the sweep removed %d files (%v), want the killed Put's one", n, err)
	}
	if left := putFiles(t, dir); len(left) != 1 || left[0] != running[0] {
		t.Fatalf("after the sweep tmp/ holds %q, want only the running Put's %q (the killed Put's was %q)", left, running[0], crashed[0])
	}
	finishLivePut(ctx, t, live, pw, done, "sweep")
}
