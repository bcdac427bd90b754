package pgtest

import (
	"net"
	"net/url"
	"testing"

	"github.com/abi-engine/engine/internal/tcpproxy"
)

// Proxied starts a proxy to the server dsn names and returns dsn with the
// proxy's address in its place, so that a test can take the server away
// (Down) or leave its connections unanswered (Block) while the server runs.
func Proxied(t testing.TB, dsn string) (string, *tcpproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	port := u.Port()
	if port == "" {
		port = "5432"
	}
	proxy := tcpproxy.Start(t, net.JoinHostPort(u.Hostname(), port))
	u.Host = proxy.Addr()
	return u.String(), proxy
}
