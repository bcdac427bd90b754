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
// the newer term waits for. Probes are not sent while bytes the server
// sent wait for their acknowledgement, so tcp_user_timeout bounds those
// at deadHost as well, as TCP_USER_TIMEOUT does this end's: the system's
// retries alone (tcp_retries2) kept such a session about a quarter of an
// hour, with what it held, such as the advisory lock of a store's open or
// the snapshot of a read whose answer was on its way. A server on Linux
// also drops a client that acknowledges its bytes but has stopped reading
// them, its window shut that long: such a read's caller has gone, or its
// ceiling (ADR 0022) ends it. tcp_user_timeout is PostgreSQL 12's; an older server
// is left to its system's retries, rather than refuse every connection
// for a setting it does not know. Over a Unix socket the server ignores
// these settings; behind a pooler they reach the server's end of one
// pooled connection, and the pooler's own keepalive settings guard the
// engine's.
var serverKeepalive = fmt.Sprintf("SET tcp_keepalives_idle = %d; SET tcp_keepalives_interval = %d; SET tcp_keepalives_count = %d; "+
	"SELECT set_config('tcp_user_timeout', '%d', false) WHERE current_setting('server_version_num')::int >= 120000",
	int((deadHost / 2).Seconds()), int((deadHost / 6).Seconds()), 3, deadHost.Milliseconds())
