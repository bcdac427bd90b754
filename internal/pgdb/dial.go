package pgdb

import (
	"net"
	"time"
)

// deadHost is how long a connection to the server may go unanswered by
// the server's host, the bytes it sent unacknowledged or its keepalive
// probes unanswered, before it is closed as dead. An engine's calls carry
// no deadline, and a statement sent into a network that drops it, or whose
// answer a network cut off, would otherwise hold its connection, and the
// call that waits on it, for as long as the kernel retries: about 15
// minutes for bytes sent (tcp_retries2), two and a half after them with
// Go's default keepalive. A server that is slow, or waits for a lock,
// acknowledges bytes and probes, and is never cut off by it; nor is one
// whose host answers while the server itself has stopped (see ADR 0002).
const deadHost = 30 * time.Second

// dialer dials the server with keepalive probes from half of deadHost
// on, and, where the system has it (Linux), TCP_USER_TIMEOUT at
// deadHost, which bounds bytes left unacknowledged as well as probes
// unanswered. connectTimeout is the dsn's connect_timeout, as pgx's own
// dialer takes it.
func dialer(connectTimeout time.Duration) *net.Dialer {
	return &net.Dialer{
		Timeout: connectTimeout,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable:   true,
			Idle:     deadHost / 2,
			Interval: deadHost / 6,
			Count:    3,
		},
		Control: userTimeout,
	}
}
