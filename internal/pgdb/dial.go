package pgdb

import (
	"fmt"
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

// serverKeepalive has the server probe each of the stores' sessions as
// the dialer has this end probe it, so that the server, too, finds within
// about deadHost a client whose host has vanished (paused, cut off,
// powered off) with no reset. The server otherwise waits on the system's
// defaults, two hours of silence and more on Linux, and meanwhile keeps
// whatever the session's open transaction holds: the fence row a write of
// an older term holds from its check to its commit, which every write of
// the newer term waits for. Over a Unix socket the server ignores these
// settings; behind a pooler they reach the server's end of one pooled
// connection, and the pooler's own keepalive settings guard the engine's.
var serverKeepalive = fmt.Sprintf("SET tcp_keepalives_idle = %d; SET tcp_keepalives_interval = %d; SET tcp_keepalives_count = %d",
	int((deadHost / 2).Seconds()), int((deadHost / 6).Seconds()), 3)
