package localfs

// TryLock and CloseLocked let the tests take a lock file's lock as another
// process's store would, with the same system lock on every system.
var (
	TryLock     = tryLock
	CloseLocked = closeLocked
)
