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
//
// Over TLS (sslmode=require and above) the look is at the socket under the
// TLS layer: the server's last message comes as TLS records, its close
// perhaps after a close_notify alert, and neither is read, only seen to be
// there. The TLS layer reads records only as pgx reads, and pgx reads a
// connection only as it uses it: what the server sends once the
// connection is idle stays in the socket. Anything else the server sends
// between statements (a notice, a TLS message after the handshake) costs
// a ping, never a write.
//
// Behind a pooler or a proxy, the socket is the engine's link to it, and
// tells what it does: a pooler that ends the link (its idle timeout, a
// server's session lost under session pooling) is seen as the server is;
// one pooling by transaction hands the next statement another server
// session, and the end of an idle one is never the engine's to see. The
// look cannot see an end still on its way: the server may end a session
// between the look and the write, which then fails of unknown outcome as
// before.
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
