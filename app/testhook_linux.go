package app

import (
	"context"
	"os"
	"runtime"
	"syscall"
	"time"

	"github.com/abi-engine/engine/ports"
)

// StopBeforeSetEnv names a test hook, for the tests that run the engine as
// a process: an engine started with it set to a key stops its own process
// (SIGSTOP) when a keyvalue set of that key has been admitted and is about
// to reach the store, as a process paused by the machine at the worst
// moment would. The test then lets another engine take over and resumes
// this one (SIGCONT). The write then goes on as one already on its way to
// the store would: fencing the engine, which cancels the calls it runs,
// no longer stops it, so only the store can. Nothing else reads it.
const StopBeforeSetEnv = "ABI_ENGINE_TEST_STOP_BEFORE_SET"

// stopBeforeSet is the keyvalue store with that hook in front of Set.
type stopBeforeSet struct {
	ports.KeyValue
	key string
}

func (s stopBeforeSet) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if key == s.key {
		stopThisProcess()
		ctx = context.WithoutCancel(ctx)
	}
	return s.KeyValue.Set(ctx, key, value, ttl)
}

// withTestHooks puts the hooks the environment asks for in front of kv.
func withTestHooks(kv ports.KeyValue) ports.KeyValue {
	if key := os.Getenv(StopBeforeSetEnv); key != "" {
		return stopBeforeSet{KeyValue: kv, key: key}
	}
	return kv
}

// StopBeforeObjectDeleteEnv names the same hook for an object: an engine
// started with it set to a key stops its own process when a delete of
// that object has been admitted and is about to reach the store.
const StopBeforeObjectDeleteEnv = "ABI_ENGINE_TEST_STOP_BEFORE_OBJECT_DELETE"

// stopBeforeDelete is the object store with that hook in front of Delete.
type stopBeforeDelete struct {
	ports.ObjectStorage
	key string
}

func (s stopBeforeDelete) Delete(ctx context.Context, key string) error {
	if key == s.key {
		stopThisProcess()
		ctx = context.WithoutCancel(ctx)
	}
	return s.ObjectStorage.Delete(ctx, key)
}

// withObjectTestHooks puts the hooks the environment asks for in front of
// objects.
func withObjectTestHooks(objects ports.ObjectStorage) ports.ObjectStorage {
	if key := os.Getenv(StopBeforeObjectDeleteEnv); key != "" {
		return stopBeforeDelete{ObjectStorage: objects, key: key}
	}
	return objects
}

// stopThisProcess stops the process before the calling goroutine runs on.
// SIGSTOP sent to the process may be taken by another thread, and until
// that thread is scheduled and stops the rest, the caller runs on: on a
// busy machine, far enough to finish the write. Sent to the calling thread,
// it is taken by that thread on its way back from the system call, so the
// process stops with the caller where it is.
func stopThisProcess() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
}
