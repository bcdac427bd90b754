package pgdb

import (
	"crypto/tls"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// spoke reports whether the server has sent anything on c, an idle
// connection of the pool, or closed it, without waiting and without
// reading: a byte waits in the socket, or its end of file. In practice
// the server speaks on an idle session only as it ends it (its FATAL
// word, then the close); Fenced.Conn pings a connection that spoke, to
// tell. A socket that cannot be looked at is taken as silent, and left to
// pgxpool's ping of a connection idle for over a second.
func spoke(c net.Conn) bool {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var said bool
	var b [1]byte
	if err := raw.Control(func(fd uintptr) {
		_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		said = err != unix.EAGAIN && err != unix.EINTR
	}); err != nil {
		return true // the socket is closed
	}
	return said
}
