//go:build !linux

package httpapi

// fileLimit is 0, unknown: the process's handles are not read from an
// rlimit here.
func fileLimit() uint64 { return 0 }
