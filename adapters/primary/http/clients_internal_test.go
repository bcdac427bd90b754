package httpapi

import (
	"net/http"
	"net/netip"
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
