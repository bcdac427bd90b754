package pgdb

import (
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// userTimeout sets TCP_USER_TIMEOUT to deadHost on a TCP socket; a Unix
// socket's connection has no network to lose, and is left as it is.
func userTimeout(network, _ string, c syscall.RawConn) error {
	if !strings.HasPrefix(network, "tcp") {
		return nil
	}
	var err error
	if cerr := c.Control(func(fd uintptr) {
		err = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(deadHost.Milliseconds()))
	}); cerr != nil {
		return cerr
	}
	return err
}
