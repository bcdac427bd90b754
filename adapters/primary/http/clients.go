package httpapi

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// clients tells which client a request or a connection counts against
// in the API's per-client bounds: the address it comes from, an IPv6 one
// by its /64, which a single host is commonly given whole. A token does
// not tell clients apart, since they all present the same one.
//
// Behind a reverse proxy every client comes from the proxy's few
// addresses, and would share one client's bounds. A request whose
// connection comes from a trusted proxy therefore counts against the
// client that the header the proxies write (header) names: the right-most
// address in it that is not itself a trusted proxy, since each proxy
// appends the address it was reached from, and everything left of that
// is whatever the client wrote. When every address in it is a trusted
// proxy, the left-most is the client: a host within the trusted ranges
// that reached the first proxy. A header that is missing, or malformed
// where it is read, counts the request against the proxy's own address.
// The other header is never read: the proxies pass it on as the client
// wrote it. The header of a connection from any other address is ignored.
type clients struct {
	trusted []netip.Prefix
	header  ProxyHeader
}

// ProxyHeader is the header trusted proxies write the address they were
// reached from into.
type ProxyHeader int

const (
	// XForwardedFor is X-Forwarded-For, a list of addresses.
	XForwardedFor ProxyHeader = iota
	// Forwarded is the header of RFC 7239, whose elements name each
	// address in a for parameter.
	Forwarded
)

func (h ProxyHeader) String() string {
	if h == Forwarded {
		return "forwarded"
	}
	return "x-forwarded-for"
}

// trusts reports whether a is one of the trusted proxies.
func (c clients) trusts(a netip.Addr) bool {
	for _, p := range c.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// of is the client r counts against.
func (c clients) of(r *http.Request) string {
	peer, ok := remoteIP(r.RemoteAddr)
	if !ok {
		return clientAt(r.RemoteAddr)
	}
	if c.trusts(peer) {
		var client netip.Addr
		var ok bool
		if c.header == Forwarded {
			client, ok = c.forwarded(r.Header.Values("Forwarded"))
		} else {
			client, ok = c.forwardedFor(r.Header.Values("X-Forwarded-For"))
		}
		if ok {
			return group(client)
		}
	}
	return group(peer)
}

// forwardedFor is the client that X-Forwarded-For, given on these lines
// in order, names (see clients), and false when an address read is not
// one. Empty entries are skipped, as HTTP has it of lists. The entries
// are read in place from the right, and only as far as the client: a
// line split whole, as a header of 64 KiB of commas is, made a slice of
// some 1 MiB for each request.
func (c clients) forwardedFor(lines []string) (netip.Addr, bool) {
	var client netip.Addr
	for i := len(lines) - 1; i >= 0; i-- {
		for rest := lines[i]; ; {
			cut := strings.LastIndexByte(rest, ',')
			if hop := strings.Trim(rest[cut+1:], " \t"); hop != "" {
				a, ok := hopIP(hop)
				if !ok {
					return netip.Addr{}, false
				}
				client = a
				if !c.trusts(a) {
					return a, true
				}
			}
			if cut < 0 {
				break
			}
			rest = rest[:cut]
		}
	}
	return client, client.IsValid()
}

// hopIP reads an address of X-Forwarded-For: an IP address, as proxies
// write it, or with a port (1.2.3.4:5678, [2001:db8::1]:5678), or an IPv6
// one in brackets, as some write it.
func hopIP(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil && a.Is6() {
			return a.Unmap().WithZone(""), true
		}
	}
	return netip.Addr{}, false
}

// remoteIP is the address of a connection's remote end, host:port.
func remoteIP(addr string) (netip.Addr, bool) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// group is the client an address is: an IPv4 address itself, an IPv6 one
// by its /64.
func group(a netip.Addr) string {
	if a.Is4() {
		return a.String()
	}
	p, _ := a.Prefix(64)
	return p.Addr().String()
}

// clientAt is the client a connection from addr, host:port, is, its
// headers unread.
func clientAt(addr string) string {
	a, ok := remoteIP(addr)
	if !ok {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return addr
		}
		return host
	}
	return group(a)
}
