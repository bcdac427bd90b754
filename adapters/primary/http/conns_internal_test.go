package httpapi

import (
	"io"
	"net"
	"net/netip"
	"testing"
	"time"
)

// A connection the API bounds per client half-closes as the TCP one it
// wraps does: net/http half-closes a connection whose request body it
// refused unread (a 413 for a declared length), so that a client still
// sending reads the answer rather than a reset. Behind the wrapper, which
// had no CloseWrite, it sent none.
func TestABoundedConnectionHalfClosesAsTCPDoes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bounded := limitConns(ln, connLimits{perClient: MaxConnsPerClient, clients: MaxClientConns, perProxy: MaxProxyConns, proxies: MaxProxyConns}, clients{})
	t.Cleanup(func() { _ = bounded.Close() })
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	server, err := bounded.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Close() })
	cw, ok := server.(interface{ CloseWrite() error })
	if !ok {
		t.Fatalf("%T has no CloseWrite: net/http cannot half-close it", server)
	}
	if err := cw.CloseWrite(); err != nil {
		t.Fatalf("CloseWrite: %v", err)
	}
	_ = client.SetReadDeadline(time.Now().Add(20 * time.Second))
	if n, err := client.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("the client read %d bytes, %v after the half-close, want EOF", n, err)
	}
	// Half-closed, not closed: the client may still send, and the API read.
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatalf("the client's write after the half-close: %v", err)
	}
	_ = server.SetReadDeadline(time.Now().Add(20 * time.Second))
	if n, err := server.Read(make([]byte, 1)); n != 1 || err != nil {
		t.Fatalf("the API read %d bytes, %v after its half-close, want the client's byte", n, err)
	}
}

// The clients' and the proxies' connections, each bound lowered to a
// quarter of the process's file limit, take at most half of it together,
// leaving the rest to the engine's backends, NATS and files; a limit that
// leaves room for both keeps them as asked, and an unknown one too.
func TestTheAPIsConnectionsTakeAtMostHalfTheFileLimit(t *testing.T) {
	for _, c := range []struct {
		files                    uint64
		clients, proxies         int
		wantClients, wantProxies int
		lowered                  bool
	}{
		{files: 1 << 20, clients: MaxClientConns, proxies: MaxProxyConns, wantClients: 4096, wantProxies: 4096},
		{files: 0, clients: MaxClientConns, proxies: MaxProxyConns, wantClients: 4096, wantProxies: 4096},
		{files: 16384, clients: MaxClientConns, proxies: MaxProxyConns, wantClients: 4096, wantProxies: 4096},
		{files: 4096, clients: MaxClientConns, proxies: MaxProxyConns, wantClients: 1024, wantProxies: 1024, lowered: true},
		{files: 1024, clients: 100, proxies: MaxProxyConns, wantClients: 100, wantProxies: 256, lowered: true},
		{files: 2, clients: MaxClientConns, proxies: MaxProxyConns, wantClients: 1, wantProxies: 1, lowered: true},
	} {
		l, lowered := limitsFor(c.clients, c.proxies, 0, false, c.files)
		if l.clients != c.wantClients || l.proxies != c.wantProxies || lowered != c.lowered {
			t.Errorf("file limit %d, asked %d and %d: clients %d, proxies %d, lowered %v; want %d, %d, %v",
				c.files, c.clients, c.proxies, l.clients, l.proxies, lowered, c.wantClients, c.wantProxies, c.lowered)
		}
		if c.files > 0 && uint64(l.clients+l.proxies) > max(c.files/2, 2) {
			t.Errorf("file limit %d: the API's connections take %d", c.files, l.clients+l.proxies)
		}
		if l.perClient > l.clients {
			t.Errorf("file limit %d: a client's most %d is past all the clients' %d", c.files, l.perClient, l.clients)
		}
		if want := max(l.proxies/ProxyShareDivisor, 1); l.perProxy != want {
			t.Errorf("file limit %d: a proxy's most %d, want a quarter of the proxies' %d", c.files, l.perProxy, l.proxies)
		}
	}
}

// One proxy address's most is a quarter of the proxies' unless asked
// otherwise, and never more than the proxies' together. Where every
// trusted proxy is named by its address, no other host can take a proxy's
// share, and one proxy (a single ingress of many workers) holds them all.
func TestAProxysMostIsAQuarterOfTheProxiesUnlessAsked(t *testing.T) {
	for _, c := range []struct {
		proxies, asked int
		named          bool
		want           int
	}{
		{proxies: MaxProxyConns, want: 1024},
		{proxies: 3, want: 1},
		{proxies: MaxProxyConns, asked: 4096, want: 4096},
		{proxies: 100, asked: 500, want: 100},
		{proxies: MaxProxyConns, named: true, want: MaxProxyConns},
		{proxies: MaxProxyConns, asked: 100, named: true, want: 100},
	} {
		if l, _ := limitsFor(MaxClientConns, c.proxies, c.asked, c.named, 0); l.perProxy != c.want {
			t.Errorf("proxies %d, asked %d, named %v: a proxy's most %d, want %d", c.proxies, c.asked, c.named, l.perProxy, c.want)
		}
	}
}

// Trusted proxies are named by their addresses only when every prefix is
// one address, IPv4 or IPv6.
func TestTrustedProxiesAreNamedWhenEachIsOneAddress(t *testing.T) {
	for _, c := range []struct {
		prefixes []string
		want     bool
	}{
		{nil, true},
		{[]string{"10.0.0.7/32", "2001:db8::1/128"}, true},
		{[]string{"10.0.0.7/32", "10.0.1.0/24"}, false},
		{[]string{"2001:db8::/64"}, false},
	} {
		var ps []netip.Prefix
		for _, p := range c.prefixes {
			ps = append(ps, netip.MustParsePrefix(p))
		}
		if got := addressesOnly(ps); got != c.want {
			t.Errorf("addressesOnly(%v) = %v, want %v", c.prefixes, got, c.want)
		}
	}
}
