//go:build windows

package localfs

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// lockedByte is where the lock lies: one byte at 2^63-1, past the end of any
// file the store writes. A Windows lock is mandatory on the bytes it
// covers, and a shared one refuses writes even through the handle that
// holds it, while a Put writes its temporary file under a shared lock
// (createTemp). A lock past the end of a file is allowed and covers none
// of its content, so the lock only excludes other locks, as flock does on
// Unix.
var lockedByte = windows.Overlapped{Offset: 0xffffffff, OffsetHigh: 0x7fffffff}

// tryLock locks f, shared or exclusive, without waiting: a lock another open
// file holds that excludes this one is an error heldElsewhere reports. The
// lock is LockFileEx's, held by the handle, and the system lets go of it
// when the process dies.
func tryLock(f *os.File, exclusive bool) error {
	flags := uint32(windows.LOCKFILE_FAIL_IMMEDIATELY)
	if exclusive {
		flags |= windows.LOCKFILE_EXCLUSIVE_LOCK
	}
	ol := lockedByte
	return windows.LockFileEx(windows.Handle(f.Fd()), flags, 0, 1, 0, &ol)
}

// heldElsewhere says whether err, tryLock's, is that another open file holds
// a lock that excludes the one asked for.
func heldElsewhere(err error) bool { return errors.Is(err, windows.ERROR_LOCK_VIOLATION) }

// closeLocked lets go of the lock tryLock took on f, if it did, and closes
// f. Closing alone would let go of it too, but Windows does that when it
// gets round to it, and a lock file is taken again at once.
func closeLocked(f *os.File) error {
	ol := lockedByte
	windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, &ol)
	return f.Close()
}
