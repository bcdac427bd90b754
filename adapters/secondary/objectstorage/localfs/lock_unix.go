//go:build unix

package localfs

import (
	"errors"
	"os"
	"syscall"
)

// tryLock locks f, shared or exclusive, without waiting: a lock another open
// file holds that excludes this one is an error heldElsewhere reports. The
// lock is flock(2)'s, on the whole file, held by the open file and let go
// when it is closed or its process dies. A signal that interrupts the call
// makes it ask again.
func tryLock(f *os.File, exclusive bool) error {
	how := syscall.LOCK_SH | syscall.LOCK_NB
	if exclusive {
		how = syscall.LOCK_EX | syscall.LOCK_NB
	}
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// heldElsewhere says whether err, tryLock's, is that another open file holds
// a lock that excludes the one asked for.
func heldElsewhere(err error) bool { return errors.Is(err, syscall.EWOULDBLOCK) }

// closeLocked closes f, which lets go of the lock tryLock took on it.
func closeLocked(f *os.File) error { return f.Close() }
