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
		client, ok := c.forwardedFor(lines)
		if wantClient, wantOK := c.forwardedForSplit(lines); client != wantClient || ok != wantOK {
			t.Fatalf("%q read in place names %v (%v), split whole %v (%v)", lines, client, ok, wantClient, wantOK)
		}
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

// Which client a request from a trusted proxy that writes Forwarded (RFC
// 7239) counts against, by the lines of the header it carries.
func TestTheClientAForwardedNames(t *testing.T) {
	c := clients{header: Forwarded, trusted: []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("fd00::/64"),
	}}
	const proxy = "10.1.2.3"
	// More trusted hops than one reading keeps from the right, so the
	// elements left of them are read from the left.
	manyTrusted := strings.Repeat("for=10.0.0.1, ", 2*keptHops) + "for=10.0.0.2"
	for _, tc := range []struct {
		name string
		fwd  []string
		want string
	}{
		{"AnIPv4Address", []string{"for=198.51.100.1"}, "198.51.100.1"},
		{"TheRightMostUntrustedElement", []string{"for=203.0.113.9, for=198.51.100.1"}, "198.51.100.1"},
		{"TrustedHopsAreSkipped", []string{"for=198.51.100.1, for=10.9.9.9;by=10.1.2.3"}, "198.51.100.1"},
		{"LinesAreOneListInOrder", []string{"for=203.0.113.9", "for=198.51.100.1,for=10.9.9.9"}, "198.51.100.1"},
		{"EveryHopTrustedIsTheLeftMost", []string{"for=10.7.7.7, for=10.8.8.8"}, "10.7.7.7"},
		{"TheParameterNameInAnyCase", []string{"FOR=198.51.100.1"}, "198.51.100.1"},
		{"OtherParametersAround", []string{"by=10.1.2.3;for=198.51.100.1;proto=https;host=\"a.example\""}, "198.51.100.1"},
		{"EmptyPairs", []string{";for=198.51.100.1;;proto=http;"}, "198.51.100.1"},
		{"AQuotedIPv4WithAPort", []string{`for="198.51.100.1:4711"`}, "198.51.100.1"},
		{"AQuotedIPv4", []string{`for="198.51.100.1"`}, "198.51.100.1"},
		{"AnIPv6InBrackets", []string{`for="[2001:db8:cafe::17]"`}, "2001:db8:cafe::"},
		{"AnIPv6WithAPort", []string{`for="[2001:db8:cafe::17]:4711"`}, "2001:db8:cafe::"},
		{"AnObfuscatedPort", []string{`for="198.51.100.1:_p-1.x"`}, "198.51.100.1"},
		{"AMappedIPv4IsTheIPv4One", []string{`for="[::ffff:198.51.100.1]"`}, "198.51.100.1"},
		{"AnEscapeInAQuotedString", []string{`for="198.51.100.\1"`}, "198.51.100.1"},
		{"ACommaInAQuotedStringSplitsNothing", []string{`for=198.51.100.1;x="a, for=203.0.113.9"`}, "198.51.100.1"},
		{"EmptyElementsAreSkipped", []string{"for=198.51.100.1, ,"}, "198.51.100.1"},
		{"JunkLeftOfTheClientIsNotRead", []string{"junk junk, for=198.51.100.1"}, "198.51.100.1"},
		{"AMissingHeaderIsTheProxy", nil, proxy},
		{"AnEmptyHeaderIsTheProxy", []string{""}, proxy},
		{"UnknownIsTheProxy", []string{"for=198.51.100.1, for=unknown"}, proxy},
		{"AnObfuscatedNameIsTheProxy", []string{"for=_hidden"}, proxy},
		{"AnElementWithoutForIsTheProxy", []string{"for=198.51.100.1, proto=https"}, proxy},
		{"ForTwiceIsTheProxy", []string{"for=198.51.100.1;for=203.0.113.9"}, proxy},
		{"AnUnquotedIPv6IsTheProxy", []string{"for=[2001:db8::1]"}, proxy},
		{"AnUnquotedPortIsTheProxy", []string{"for=198.51.100.1:80"}, proxy},
		{"ABracketedIPv4IsTheProxy", []string{`for="[198.51.100.1]"`}, proxy},
		{"AnIPv6WithoutBracketsIsTheProxy", []string{`for="2001:db8::1"`}, proxy},
		{"AZoneIsTheProxy", []string{`for="[fe80::1%eth0]"`}, proxy},
		{"ALongPortIsTheProxy", []string{`for="198.51.100.1:123456"`}, proxy},
		{"AnEmptyPortIsTheProxy", []string{`for="198.51.100.1:"`}, proxy},
		{"BlanksAroundTheEqualsAreTheProxy", []string{"for =198.51.100.1"}, proxy},
		{"BlanksAroundASemicolonAreTheProxy", []string{"for=198.51.100.1 ;proto=http"}, proxy},
		{"AnEmptyValueIsTheProxy", []string{"for="}, proxy},
		{"AnUnendedQuoteIsTheProxy", []string{`for="198.51.100.1, for=198.51.100.2`}, proxy},
		{"AControlCharacterIsTheProxy", []string{"for=\"198.51.100.1\x01\""}, proxy},
		{"ALeadingZeroIsTheProxy", []string{"for=198.51.100.01"}, proxy},
		{"AnUntrustedHopLeftOfManyTrusted", []string{"junk, for=198.51.100.1, " + manyTrusted}, "198.51.100.1"},
		{"AnUntrustedLineLeftOfManyTrusted", []string{"for=203.0.113.9, for=198.51.100.1", "for=10.0.0.3", manyTrusted}, "198.51.100.1"},
		{"ManyTrustedAreTheLeftMost", []string{"for=10.7.7.7, " + manyTrusted}, "10.7.7.7"},
		{"ManyTrustedAloneAreTheLeftMost", []string{manyTrusted}, "10.0.0.1"},
		{"JunkLeftOfManyTrustedIsTheProxy", []string{"for=198.51.100.1, junk, " + manyTrusted}, proxy},
		{"AnUnendedLineLeftOfManyTrustedIsTheProxy", []string{`for=198.51.100.1, for="x`, manyTrusted}, proxy},
		{"AnUnendedLineOfManyTrustedIsTheProxy", []string{`for=198.51.100.1, ` + manyTrusted + `, x="`}, proxy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &http.Request{RemoteAddr: proxy + ":4000", Header: http.Header{}}
			for _, l := range tc.fwd {
				r.Header.Add("Forwarded", l)
			}
			r.Header.Add("X-Forwarded-For", "203.0.113.77")
			if got := c.of(r); got != tc.want {
				t.Fatalf("from the proxy with Forwarded %q: client %q, want %q", tc.fwd, got, tc.want)
			}
		})
	}
}

// Forwarded is whatever a client, or any hop before the trusted proxy,
// wrote. Whatever it holds, reading it never fails the request, the client
// it names is the address of one of its elements' for, with only trusted
// proxies named by the elements to that one's right, and a connection from
// an address that is not trusted is its own client, whatever the header
// says.
func FuzzForwarded(f *testing.F) {
	for _, seed := range [][2]string{
		{"for=203.0.113.9, for=198.51.100.1", ""},
		{`for=10.7.7.7;by=10.1.2.3, For="[2001:db8::1]:4711"`, "for=10.9.9.9"},
		{`for="[fd00::1]";proto=https;host="a, b"`, ", ,"},
		{`for="198.51.100.1:_p1"`, `for=unknown, for="\"x"`},
		{"junk, for=_hidden", "for=198.51.100.1;;"},
		{"for=198.51.100.1, junk", strings.Repeat("for=10.0.0.1, ", 2*keptHops)},
		{`for="x`, strings.Repeat(`for="10.0.0.1";x=",", `, 2*keptHops)},
	} {
		f.Add(seed[0], seed[1])
	}
	c := clients{header: Forwarded, trusted: []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("192.168.1.7/32"),
		netip.MustParsePrefix("fd00::/64"),
	}}
	f.Fuzz(func(t *testing.T, first, second string) {
		lines := []string{first, second}
		client, ok := c.forwarded(lines)
		if wantClient, wantOK := c.forwardedSplit(lines); client != wantClient || ok != wantOK {
			t.Fatalf("%q read in place names %v (%v), split whole %v (%v)", lines, client, ok, wantClient, wantOK)
		}
		if ok {
			// The addresses the elements name, left to right, as far as
			// they split and name one; the walk read no further left.
			var hops []netip.Addr
			for _, l := range lines {
				elements, ok := splitWhole(l)
				if !ok {
					continue
				}
				for _, e := range elements {
					if a, ok := forwardedFrom(e); ok {
						hops = append(hops, a)
					}
				}
			}
			at := -1 // the right-most element that names it
			for i, a := range hops {
				if a == client {
					at = i
				}
			}
			if at < 0 {
				t.Fatalf("%q names %v, which none of its elements names", lines, client)
			}
			if c.trusts(client) {
				if slices.ContainsFunc(hops, func(a netip.Addr) bool { return !c.trusts(a) }) {
					t.Fatalf("%q names the trusted %v while an element names an untrusted address", lines, client)
				}
			} else if slices.ContainsFunc(hops[at+1:], func(a netip.Addr) bool { return !c.trusts(a) }) {
				t.Fatalf("%q names %v, with an untrusted address to its right", lines, client)
			}
			if client.Is4In6() || client.Zone() != "" {
				t.Fatalf("%q names %v, not unmapped and without a zone", lines, client)
			}
		}
		r := &http.Request{RemoteAddr: "203.0.113.5:4000", Header: http.Header{"Forwarded": lines}}
		if got := c.of(r); got != "203.0.113.5" {
			t.Fatalf("a request from an untrusted address with %q counts against %q, want its own address", lines, got)
		}
		r.RemoteAddr = "10.1.2.3:4000"
		got := c.of(r)
		if got == "" {
			t.Fatalf("a request from a trusted proxy with %q counts against no client", lines)
		}
		r.Header.Set("X-Forwarded-For", "198.51.100.250")
		if spoofed := c.of(r); spoofed != got {
			t.Fatalf("a request from a proxy that writes Forwarded (%q) counts against %q with an X-Forwarded-For, %q without", lines, spoofed, got)
		}
	})
}

// forwardedForSplit is forwardedFor as it read X-Forwarded-For before,
// each line split whole into a list: the fuzzer holds the reading in
// place to the same answers.
func (c clients) forwardedForSplit(lines []string) (netip.Addr, bool) {
	var client netip.Addr
	for i := len(lines) - 1; i >= 0; i-- {
		hops := strings.Split(lines[i], ",")
		for j := len(hops) - 1; j >= 0; j-- {
			hop := strings.Trim(hops[j], " \t")
			if hop == "" {
				continue
			}
			a, ok := hopIP(hop)
			if !ok {
				return netip.Addr{}, false
			}
			client = a
			if !c.trusts(a) {
				return a, true
			}
		}
	}
	return client, client.IsValid()
}

// forwardedSplit is forwarded as it read Forwarded before, each line
// split whole into a list of its elements (splitWhole): the fuzzer holds
// the reading in place to the same answers.
func (c clients) forwardedSplit(lines []string) (netip.Addr, bool) {
	var client netip.Addr
	for i := len(lines) - 1; i >= 0; i-- {
		elements, ok := splitWhole(lines[i])
		if !ok {
			return netip.Addr{}, false
		}
		for j := len(elements) - 1; j >= 0; j-- {
			if elements[j] == "" {
				continue
			}
			a, ok := forwardedFrom(elements[j])
			if !ok {
				return netip.Addr{}, false
			}
			client = a
			if !c.trusts(a) {
				return a, true
			}
		}
	}
	return client, client.IsValid()
}

// splitWhole splits a line of Forwarded at the commas outside quoted
// strings, each element trimmed of the blanks around it, and is false
// when a quoted string does not end on the line.
func splitWhole(line string) ([]string, bool) {
	var out []string
	start, quoted := 0, false
	for i := 0; i < len(line); i++ {
		switch b := line[i]; {
		case quoted && b == '\\':
			i++
		case b == '"':
			quoted = !quoted
		case !quoted && b == ',':
			out = append(out, strings.Trim(line[start:i], " \t"))
			start = i + 1
		}
	}
	if quoted {
		return nil, false
	}
	return append(out, strings.Trim(line[start:], " \t")), true
}

// Reading the client from a header of the most bytes the server takes
// allocates nothing, however many entries or elements it splits into:
// each line was split whole into a list, and 64 KiB of commas made some
// 1 MiB of garbage for each request in X-Forwarded-For and some 2 MiB in
// Forwarded. Hops left of the client, which the client wrote, are not
// read, and a header of more trusted hops than one reading keeps is read
// again further left rather than kept whole.
func TestReadingTheClientFromAHeaderOfManyEntriesAllocatesNothing(t *testing.T) {
	c := clients{trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	most := func(unit, end string) string {
		return strings.Repeat(unit, (MaxHeaderBytes-len(end))/len(unit)) + end
	}
	client := netip.MustParseAddr("198.51.100.1")
	trusted := netip.MustParseAddr("10.0.0.1")
	for _, tc := range []struct {
		name   string
		header ProxyHeader
		lines  []string
		want   netip.Addr
	}{
		{"CommasBeforeTheClient", XForwardedFor, []string{most(",", "198.51.100.1")}, client},
		{"OnlyCommas", XForwardedFor, []string{most(",", "")}, netip.Addr{}},
		{"JunkLeftOfTheClient", XForwardedFor, []string{most("x,", "198.51.100.1, 10.0.0.1")}, client},
		{"EveryHopTrusted", XForwardedFor, []string{most("10.0.0.1,", "10.0.0.1")}, trusted},
		{"CommasBeforeTheClientsElement", Forwarded, []string{most(",", "for=198.51.100.1")}, client},
		{"OnlyCommasOfForwarded", Forwarded, []string{most(",", "")}, netip.Addr{}},
		{"UnknownsLeftOfTheClient", Forwarded, []string{most("for=unknown,", "for=198.51.100.1, for=10.0.0.1")}, client},
		{"QuotedCommas", Forwarded, []string{most(`x=",,,,",`, `for="198.51.100.1:80"`)}, client},
		{"EveryElementTrusted", Forwarded, []string{most("for=10.0.0.1,", "for=10.0.0.1")}, trusted},
		{"ManyLines", Forwarded, strings.Split(most("for=10.0.0.1\n", "for=198.51.100.1"), "\n"), client},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.header = tc.header
			read := c.forwardedFor
			if tc.header == Forwarded {
				read = c.forwarded
			}
			if got, ok := read(tc.lines); got != tc.want || ok != tc.want.IsValid() {
				t.Fatalf("the header names %v (%v), want %v", got, ok, tc.want)
			}
			if n := testing.AllocsPerRun(20, func() { _, _ = read(tc.lines) }); n != 0 {
				t.Fatalf("reading the client from %d bytes of %s allocated %v times, want none", len(strings.Join(tc.lines, "")), tc.header, n)
			}
		})
	}
}
