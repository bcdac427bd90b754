package httpapi

import (
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// Which client a request counts against, by where it comes from and the
// X-Forwarded-For lines it carries.
func TestTheClientOfARequest(t *testing.T) {
	c := clients{trusted: []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("192.168.1.7/32"),
		netip.MustParsePrefix("fd00::/64"),
	}}
	for _, tc := range []struct {
		name, remote string
		xff          []string
		want         string
	}{
		{"AnUntrustedAddressIsItself", "203.0.113.5:4000", []string{"198.51.100.1"}, "203.0.113.5"},
		{"AnIPv6AddressIsItsSlash64", "[2001:db8:1:2:3:4:5:6]:4000", nil, "2001:db8:1:2::"},
		{"AMappedIPv4AddressIsTheIPv4One", "[::ffff:203.0.113.5]:4000", nil, "203.0.113.5"},
		{"ATrustedProxyWithoutTheHeaderIsItself", "10.1.2.3:4000", nil, "10.1.2.3"},
		{"TheRightMostUntrustedAddress", "10.1.2.3:4000", []string{"203.0.113.9, 198.51.100.1"}, "198.51.100.1"},
		{"TrustedHopsAreSkipped", "10.1.2.3:4000", []string{"203.0.113.9, 198.51.100.1, 192.168.1.7, 10.9.9.9"}, "198.51.100.1"},
		{"LinesAreOneListInOrder", "10.1.2.3:4000", []string{"203.0.113.9", "198.51.100.1,10.9.9.9"}, "198.51.100.1"},
		{"EveryHopTrustedIsTheLeftMost", "10.1.2.3:4000", []string{"10.7.7.7, 192.168.1.7"}, "10.7.7.7"},
		{"AnIPv6ClientIsItsSlash64", "[fd00::1]:4000", []string{"2001:db8:1:2:3:4:5:6"}, "2001:db8:1:2::"},
		{"AHopWithAPort", "10.1.2.3:4000", []string{"198.51.100.1:5678"}, "198.51.100.1"},
		{"AnIPv6HopInBrackets", "10.1.2.3:4000", []string{"[2001:db8::1]"}, "2001:db8::"},
		{"AnIPv6HopWithAPort", "10.1.2.3:4000", []string{"[2001:db8::1]:5678"}, "2001:db8::"},
		{"EmptyEntriesAreSkipped", "10.1.2.3:4000", []string{"198.51.100.1, ,"}, "198.51.100.1"},
		{"JunkLeftOfTheClientIsNotRead", "10.1.2.3:4000", []string{"junk, 198.51.100.1"}, "198.51.100.1"},
		{"AMalformedHopReadIsTheProxy", "10.1.2.3:4000", []string{"198.51.100.1, junk"}, "10.1.2.3"},
		{"AnEmptyHeaderIsTheProxy", "10.1.2.3:4000", []string{""}, "10.1.2.3"},
		{"AnAddressNextToATrustedOneIsNotTrusted", "192.168.1.8:4000", []string{"198.51.100.1"}, "192.168.1.8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &http.Request{RemoteAddr: tc.remote, Header: http.Header{}}
			for _, l := range tc.xff {
				r.Header.Add("X-Forwarded-For", l)
			}
			if got := c.of(r); got != tc.want {
				t.Fatalf("from %s with X-Forwarded-For %q: client %q, want %q", tc.remote, tc.xff, got, tc.want)
			}
		})
	}
}

// X-Forwarded-For is whatever a client, or any hop before the trusted
// proxy, wrote. Whatever it holds, reading it never fails the request, the
// client it names is an address one of its hops spells, with only trusted
// proxies to that hop's right, and a connection from an address that is
// not trusted is its own client, whatever the header says.
func FuzzForwardedFor(f *testing.F) {
	for _, seed := range [][2]string{
		{"203.0.113.9, 198.51.100.1", ""},
		{"10.7.7.7, 192.168.1.7", "198.51.100.1:5678"},
		{"[2001:db8::1]:5678, junk", ", ,"},
		{"::ffff:10.1.2.3%eth0", "[fd00::1]"},
	} {
		f.Add(seed[0], seed[1])
	}
	c := clients{trusted: []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("192.168.1.7/32"),
		netip.MustParsePrefix("fd00::/64"),
	}}
	f.Fuzz(func(t *testing.T, first, second string) {
		lines := []string{first, second}
		client, ok := c.forwarded(lines)
		if ok {
			var hops []netip.Addr
			for _, l := range lines {
				for _, h := range strings.Split(l, ",") {
					if a, ok := hopIP(strings.Trim(h, " \t")); ok {
						hops = append(hops, a)
					}
				}
			}
			at := -1 // the right-most hop that spells it
			for i, a := range hops {
				if a == client {
					at = i
				}
			}
			if at < 0 {
				t.Fatalf("%q names %v, which none of its hops spells", lines, client)
			}
			if c.trusts(client) {
				if slices.ContainsFunc(hops, func(a netip.Addr) bool { return !c.trusts(a) }) {
					t.Fatalf("%q names the trusted %v while an untrusted hop is in it", lines, client)
				}
			} else if slices.ContainsFunc(hops[at+1:], func(a netip.Addr) bool { return !c.trusts(a) }) {
				t.Fatalf("%q names %v, with an untrusted hop to its right", lines, client)
			}
		}
		r := &http.Request{RemoteAddr: "203.0.113.5:4000", Header: http.Header{"X-Forwarded-For": lines}}
		if got := c.of(r); got != "203.0.113.5" {
			t.Fatalf("a request from an untrusted address with %q counts against %q, want its own address", lines, got)
		}
		r.RemoteAddr = "10.1.2.3:4000"
		if got := c.of(r); got == "" {
			t.Fatalf("a request from a trusted proxy with %q counts against no client", lines)
		}
	})
}
