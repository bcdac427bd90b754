//go:build !linux

package pgdb

import "syscall"

// userTimeout does nothing where TCP_USER_TIMEOUT is not to be had: the
// keepalive probes alone bound a connection whose answers stopped coming
// after its bytes were acknowledged.
func userTimeout(string, string, syscall.RawConn) error { return nil }
