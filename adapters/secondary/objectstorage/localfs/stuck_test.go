package localfs_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/objectstorage/localfs"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

// holdStripe takes, as another process would, the lock a Put or a Delete
// of key takes before it changes the key, and returns its release.
func holdStripe(t *testing.T, dir, key string) func() {
	t.Helper()
	sum := sha256.Sum256([]byte(key))
	f, err := os.OpenFile(filepath.Join(dir, "locks", hex.EncodeToString(sum[:])[:2]), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := localfs.TryLock(f, true); err != nil {
		f.Close()
		t.Fatal(err)
	}
	return func() { localfs.CloseLocked(f) }
}

// An engine paused while it holds a key's lock (a container paused in the
// middle of a Put, on the host whose directory its successor shares) keeps
// it until it runs again. A Put or a Delete of that key that waits for the
// lock ends when its caller gives up, with the caller's error, and changes
// nothing; once the lock is free, the next ones go through. Before, they
// waited for the lock whatever their context, each holding a thread, for
// as long as the holder stayed paused.
func TestAPutOrDeleteWaitingForALockHeldByAPausedEngineEndsWithItsContext(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	if _, err := s.Put(t.Context(), "k", strings.NewReader("old"), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	release := holdStripe(t, dir, "k")
	released := false
	defer func() {
		if !released {
			release()
		}
	}()

	calls := map[string]func(ctx context.Context) error{
		"Put": func(ctx context.Context) error {
			_, err := s.Put(ctx, "k", strings.NewReader("new"), ports.PutObjectOptions{})
			return err
		},
		"Delete": func(ctx context.Context) error { return s.Delete(ctx, "k") },
	}
	for name, call := range calls {
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		done := make(chan error, 1)
		go func() { done <- call(ctx) }()
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("a %s waiting for a held lock, whose caller gave up: %v, want context.DeadlineExceeded", name, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("a %s waiting for a held lock still waits 30 s after its caller gave up", name)
			release()
			released = true
			<-done
		}
		cancel()
	}
	if !released {
		release()
		released = true
	}
	if got := contracttests.ObjectContent(t, s, "k"); got != "old" {
		t.Fatalf("after the calls that gave up, the object holds %q, want %q", got, "old")
	}
	if _, err := s.Put(t.Context(), "k", strings.NewReader("new"), ports.PutObjectOptions{}); err != nil {
		t.Fatalf("a Put once the lock is free: %v", err)
	}
	if err := s.Delete(t.Context(), "k"); err != nil {
		t.Fatalf("a Delete once the lock is free: %v", err)
	}
}

// Callers that give up on a key whose lock another engine on the host
// holds leave nothing waiting for that lock. Before, each left a goroutine
// in the system's lock call, which holds a thread, until the holder let
// go: a caller that sent its call again each time it gave up made the
// engine take one thread more a call, with no bound, for as long as the
// holder stayed paused.
func TestCallsThatGiveUpOnAHeldLockLeaveNothingWaitingForIt(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	release := holdStripe(t, dir, "k")
	t.Cleanup(release)
	const calls = 32
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
			defer cancel()
			var err error
			if i%2 == 0 {
				_, err = s.Put(ctx, "k", strings.NewReader("v"), ports.PutObjectOptions{})
			} else {
				err = s.Delete(ctx, "k")
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("call %d on a held lock, whose caller gave up: %v, want context.DeadlineExceeded", i, err)
			}
		})
	}
	wg.Wait()
	if n := waitingOnLock(); n > 0 {
		t.Fatalf("%d calls gave up on a held lock; %d goroutines still wait for it in the system's lock call, a thread each", calls, n)
	}
}

// waitingOnLock counts the goroutines in localfs's lock call.
func waitingOnLock() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "localfs.flock(")
		}
		buf = make([]byte, 2*len(buf))
	}
}
