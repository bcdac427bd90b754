//go:build linux

package httpapi

import "syscall"

// fileLimit is the process's limit of open files (its soft limit, which
// Go raises to the hard one as it starts), 0 when it is unlimited or
// cannot be read.
func fileLimit() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil || l.Cur == ^uint64(0) {
		return 0
	}
	return l.Cur
}
