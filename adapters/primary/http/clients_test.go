package httpapi_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	httpapi "github.com/abi-engine/engine/adapters/primary/http"
	kvmemory "github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
)

// The loopback addresses of these tests: a trusted proxy, and a host that
// is not one.
const (
	proxyIP      = "127.0.8.1"
	untrustedIP  = "127.0.8.2"
	requestShare = 32 // a quarter of the API's 128 requests in flight
)

// heldBehindProxy serves the API, trusting proxyIP, over a key-value
// store whose sets of keys starting with "held-" wait until free is
// called, and returns its URL, the store and free.
func heldBehindProxy(t *testing.T) (url string, held *heldKeyValue, free func()) {
	t.Helper()
	return heldBehind(t, httpapi.XForwardedFor)
}

// heldBehind is heldBehindProxy with a proxy that writes header.
func heldBehind(t *testing.T, header httpapi.ProxyHeader) (url string, held *heldKeyValue, free func()) {
	t.Helper()
	release := make(chan struct{})
	free = sync.OnceFunc(func() { close(release) })
	t.Cleanup(free)
	kv, err := kvmemory.Open(t.Context(), kvmemory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	held = &heldKeyValue{KeyValue: kv, release: release}
	url = serveReal(t, heldKernel(t, held), httpapi.Options{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix(proxyIP + "/32")},
		ProxyHeader:    header,
	})
	return url, held, free
}

// putAs PUTs "v" to url as client, with X-Forwarded-For lines xff (none:
// no header), and answers on the channel returned.
func putAs(client *http.Client, url string, xff ...string) <-chan answer {
	return putWith(client, url, "X-Forwarded-For", xff...)
}

// putWith is putAs with lines of the header named.
func putWith(client *http.Client, url, header string, lines ...string) <-chan answer {
	h := http.Header{}
	for _, line := range lines {
		h.Add(header, line)
	}
	return put(client, url, h)
}

// put PUTs "v" to url as client, with headers h, and answers on the
// channel returned.
func put(client *http.Client, url string, h http.Header) <-chan answer {
	done := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, "PUT", url, strings.NewReader("v"))
		if err != nil {
			done <- answer{body: err.Error()}
			return
		}
		maps.Copy(req.Header, h)
		resp, err := client.Do(req)
		if err != nil {
			done <- answer{body: err.Error()}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		done <- answer{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: string(b)}
	}()
	return done
}

// holdShare sends requestShare slow requests to url as client, the i-th
// with the X-Forwarded-For lines xff(i) makes, waits until the engine
// holds them all, and returns the channel of their answers.
func holdShare(t *testing.T, url string, held *heldKeyValue, client *http.Client, xff func(i int) []string) <-chan answer {
	t.Helper()
	return holdShareWith(t, url, held, client, "X-Forwarded-For", xff)
}

// holdShareWith is holdShare with lines of the header named.
func holdShareWith(t *testing.T, url string, held *heldKeyValue, client *http.Client, header string, lines func(i int) []string) <-chan answer {
	t.Helper()
	answers := make(chan answer, requestShare)
	for i := range requestShare {
		got := putWith(client, fmt.Sprintf("%s/v1/kv/held-%d", url, i), header, lines(i)...)
		go func() { answers <- <-got }()
	}
	waitUntil(t, func() bool {
		select {
		case a := <-answers:
			t.Fatalf("a request within a client's share answered %d before it was released: %s", a.code, a.body)
		default:
		}
		return held.held.Load() == requestShare
	})
	return answers
}

// refusedShare fails t unless a is a 503 naming the client's share.
func refusedShare(t *testing.T, a answer, what string) {
	t.Helper()
	if a.code != http.StatusServiceUnavailable || a.retryAfter == "" || !strings.Contains(a.body, "share") {
		t.Fatalf("%s answered %d (Retry-After %q): %s; want 503 naming the client's share", what, a.code, a.retryAfter, a.body)
	}
}

// allAnswered frees the held requests and fails t unless each succeeded.
func allAnswered(t *testing.T, answers <-chan answer, free func()) {
	t.Helper()
	free()
	for range requestShare {
		if a := <-answers; a.code != http.StatusNoContent {
			t.Fatalf("a request within its client's share answered %d: %s", a.code, a.body)
		}
	}
}

// Two clients behind one trusted proxy have a share each: one holding its
// share of the requests in flight leaves the other its own, and is held
// to its share. Every client behind a proxy reached the API from the
// proxy's address, so they shared one client's 32 requests, 2 transfers
// and 16 MiB of bodies, and one busy client starved every other.
func TestClientsBehindATrustedProxyHaveAShareEach(t *testing.T) {
	url, held, free := heldBehindProxy(t)
	proxy := clientFrom(proxyIP)
	answers := holdShare(t, url, held, proxy, func(int) []string { return []string{"198.51.100.1"} })

	if a := <-putAs(proxy, url+"/v1/kv/other", "198.51.100.2"); a.code != http.StatusNoContent {
		t.Fatalf("a client behind the proxy, while another behind it held its share, answered %d: %s", a.code, a.body)
	}
	// A proxy in front of the proxy, trusted too, is skipped.
	if a := <-putAs(proxy, url+"/v1/kv/other", "198.51.100.3, "+proxyIP); a.code != http.StatusNoContent {
		t.Fatalf("a client behind two trusted proxies answered %d: %s", a.code, a.body)
	}
	refusedShare(t, <-putAs(proxy, url+"/v1/kv/more", "198.51.100.1"), "a request past its client's share, behind the proxy,")
	allAnswered(t, answers, free)
}

// A client behind a trusted proxy is the right-most address of
// X-Forwarded-For that is not a trusted proxy: what it writes into the
// header itself, left of what the proxy appends, does not make it another
// client, nor the proxy. Were the left-most taken, a client could write a
// new address into each request and have a share for each.
func TestASpoofedLeftMostForwardedForDoesNotEscapeTheClientsShare(t *testing.T) {
	url, held, free := heldBehindProxy(t)
	proxy := clientFrom(proxyIP)
	answers := holdShare(t, url, held, proxy, func(i int) []string {
		return []string{fmt.Sprintf("203.0.113.%d, 198.51.100.1", i+1)}
	})
	for _, xff := range [][]string{
		{"203.0.113.200, 198.51.100.1"},
		{proxyIP + ", 198.51.100.1"},
		{"not an address, 198.51.100.1"},
		{"203.0.113.201", "198.51.100.1"}, // the client's own line, then the proxy's
	} {
		refusedShare(t, <-putAs(proxy, url+"/v1/kv/more", xff...), fmt.Sprintf("a request past its client's share with X-Forwarded-For %q", xff))
	}
	allAnswered(t, answers, free)
}

// A request from an address that is not a trusted proxy counts against
// that address, whatever its X-Forwarded-For says: anyone can write the
// header.
func TestAForwardedForFromAnUntrustedAddressIsIgnored(t *testing.T) {
	url, held, free := heldBehindProxy(t)
	client := clientFrom(untrustedIP)
	answers := holdShare(t, url, held, client, func(i int) []string {
		return []string{fmt.Sprintf("198.51.100.%d", i+1)}
	})
	refusedShare(t, <-putAs(client, url+"/v1/kv/more", "198.51.100.200"), "a request past its share from an untrusted address")
	allAnswered(t, answers, free)
}

// A request from a trusted proxy whose X-Forwarded-For is missing, or
// malformed where it is read, counts against the proxy's own address;
// a client the header names is apart from it.
func TestAMissingOrMalformedForwardedForCountsAgainstTheProxy(t *testing.T) {
	url, held, free := heldBehindProxy(t)
	proxy := clientFrom(proxyIP)
	answers := holdShare(t, url, held, proxy, func(int) []string { return nil })
	for _, xff := range [][]string{nil, {"unknown"}, {"198.51.100.1, 198.51.100.2:x"}, {" , "}} {
		refusedShare(t, <-putAs(proxy, url+"/v1/kv/more", xff...), fmt.Sprintf("a request from the proxy with X-Forwarded-For %q, past the proxy's share,", xff))
	}
	if a := <-putAs(proxy, url+"/v1/kv/other", "198.51.100.1"); a.code != http.StatusNoContent {
		t.Fatalf("a client the proxy names, while the proxy's own address held its share, answered %d: %s", a.code, a.body)
	}
	allAnswered(t, answers, free)
}

// A trusted proxy's connections are not bounded as one client's: they
// carry its clients' requests, and the bound is taken before a header is
// read. Another address is still bounded.
func TestATrustedProxyHoldsMoreThanOneClientsConnections(t *testing.T) {
	url := serveReal(t, memoryServices(t), httpapi.Options{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.8.0/30")},
	})
	for i := range httpapi.MaxConnsPerClient + 1 {
		c := dialFrom(t, proxyIP, url)
		if code, err := probe(c, bufio.NewReader(c)); code != http.StatusOK {
			t.Fatalf("connection %d of a trusted proxy answered %d, %v", i+1, code, err)
		}
	}
	for range httpapi.MaxConnsPerClient {
		c := dialFrom(t, "127.0.8.4", url)
		if code, err := probe(c, bufio.NewReader(c)); code != http.StatusOK {
			t.Fatalf("a connection within an untrusted client's most answered %d, %v", code, err)
		}
	}
	c := dialFrom(t, "127.0.8.4", url)
	if code, err := probe(c, bufio.NewReader(c)); code != http.StatusServiceUnavailable {
		t.Fatalf("a connection past an untrusted client's most answered %d (%v), want 503", code, err)
	}
}

// A proxy that writes Forwarded (RFC 7239) rather than X-Forwarded-For,
// once http.proxy_header names it, has its clients counted apart by the
// right-most address the header's for parameters name that is not a
// trusted proxy; the X-Forwarded-For it passes on, which its client
// wrote, is not read. Only X-Forwarded-For was read, so every client
// behind such a proxy shared the proxy's one share, and a client could
// write any address into X-Forwarded-For and count against it.
func TestClientsBehindAProxyThatWritesForwardedHaveAShareEach(t *testing.T) {
	url, held, free := heldBehind(t, httpapi.Forwarded)
	proxy := clientFrom(proxyIP)
	answers := holdShareWith(t, url, held, proxy, "Forwarded", func(i int) []string {
		return []string{fmt.Sprintf(`for=203.0.113.%d;proto=http, for=198.51.100.1;by=%s`, i+1, proxyIP)}
	})

	for _, fwd := range [][]string{
		{`for="[2001:db8:cafe::17]:4711"`},
		{"for=198.51.100.2;proto=https", "for=" + proxyIP}, // a proxy in front, trusted too, is skipped
		{`For="198.51.100.3:_p1";host=example.com`},
	} {
		if a := <-putWith(proxy, url+"/v1/kv/other", "Forwarded", fwd...); a.code != http.StatusNoContent {
			t.Fatalf("a client behind the proxy with Forwarded %q, while another held its share, answered %d: %s", fwd, a.code, a.body)
		}
	}
	for _, fwd := range [][]string{
		{"for=198.51.100.1"},
		{`for=203.0.113.200, for="198.51.100.1:80"`},
		{`for="junk, for=203.0.113.201", for=198.51.100.1`},
		{"for=203.0.113.202", "for=198.51.100.1"},
	} {
		refusedShare(t, <-putWith(proxy, url+"/v1/kv/more", "Forwarded", fwd...),
			fmt.Sprintf("a request past its client's share with Forwarded %q", fwd))
	}

	// The client wrote X-Forwarded-For, and the proxy passed it on.
	refusedShare(t, <-put(proxy, url+"/v1/kv/more", http.Header{
		"X-Forwarded-For": {"203.0.113.203"}, "Forwarded": {"for=198.51.100.1"},
	}), "a request past its client's share with an X-Forwarded-For of the client's own")
	allAnswered(t, answers, free)
}

// A request from the proxy whose Forwarded is missing, does not parse
// where it is read, or names no address there (unknown, an obfuscated
// name, no for at all), counts against the proxy's own address.
func TestAForwardedThatNamesNoAddressCountsAgainstTheProxy(t *testing.T) {
	url, held, free := heldBehind(t, httpapi.Forwarded)
	proxy := clientFrom(proxyIP)
	answers := holdShareWith(t, url, held, proxy, "Forwarded", func(int) []string { return nil })
	for _, fwd := range [][]string{
		nil,
		{"for=unknown"},
		{"for=_hidden"},
		{"proto=https;by=" + proxyIP},
		{"for=198.51.100.1, for=198.51.100.2 ;proto=http"},
		{`for="198.51.100.1`},
		{"for=198.51.100.1;for=198.51.100.2"},
		{"for = 198.51.100.1"},
		{"for=[2001:db8::1]"},
	} {
		refusedShare(t, <-putWith(proxy, url+"/v1/kv/more", "Forwarded", fwd...),
			fmt.Sprintf("a request from the proxy with Forwarded %q, past the proxy's share,", fwd))
	}
	allAnswered(t, answers, free)
}

// The trusted proxies hold at most their connections all together: one
// more, from any of them, is answered 503 and closed, while a client that
// is not a proxy still connects, and a connection a proxy closes gives its
// place back. A trusted range is often wide, and a proxy's connections
// were bounded by nothing, so any host in the range could open as many as
// its ports allowed and hold the engine's memory with them.
func TestTheTrustedProxiesHoldOnlyTheirConnectionsTogether(t *testing.T) {
	const most = 4 // one for each proxy, a quarter of the most
	url := serveReal(t, memoryServices(t), httpapi.Options{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.8.0/29")},
		MaxProxyConns:  most,
	})
	var held []net.Conn
	for i := range most {
		c := dialFrom(t, fmt.Sprintf("127.0.8.%d", 1+i), url)
		if code, err := probe(c, bufio.NewReader(c)); code != http.StatusOK {
			t.Fatalf("connection %d of the trusted proxies, within their most of %d, answered %d, %v", i+1, most, code, err)
		}
		held = append(held, c)
	}
	c := dialFrom(t, "127.0.8.5", url)
	r := bufio.NewReader(c)
	if code, err := probe(c, r); code != http.StatusServiceUnavailable {
		t.Fatalf("a connection of a trusted proxy past the proxies' most of %d answered %d (%v), want 503", most, code, err)
	}
	if _, err := r.ReadByte(); err == nil {
		t.Fatalf("a connection past the proxies' most was kept open after its 503")
	}
	other := dialFrom(t, "127.0.8.9", url)
	if code, err := probe(other, bufio.NewReader(other)); code != http.StatusOK {
		t.Fatalf("a client that is no proxy, while the proxies held their most, answered %d, %v", code, err)
	}

	_ = held[0].Close()
	waitUntil(t, func() bool {
		c := dialFrom(t, "127.0.8.5", url)
		code, _ := probe(c, bufio.NewReader(c))
		return code == http.StatusOK
	})
}

// One trusted proxy address holds at most a quarter of the proxies'
// connections: one more from it is answered 503 and closed, while another
// proxy still connects, and a connection it closes gives its place back.
// A trusted range is often wide, an ingress's whole pod range, and one
// host in it that opened all it could filled the proxies' one bound and
// had the real ingress's connections refused.
func TestOneTrustedProxyHoldsOnlyItsShareOfTheProxiesConnections(t *testing.T) {
	const most, share = 8, 2
	url := serveReal(t, memoryServices(t), httpapi.Options{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.8.0/29")},
		MaxProxyConns:  most,
	})
	var held []net.Conn
	for i := range share {
		c := dialFrom(t, proxyIP, url)
		if code, err := probe(c, bufio.NewReader(c)); code != http.StatusOK {
			t.Fatalf("connection %d of a trusted proxy, within its share of %d, answered %d, %v", i+1, share, code, err)
		}
		held = append(held, c)
	}
	c := dialFrom(t, proxyIP, url)
	r := bufio.NewReader(c)
	if code, err := probe(c, r); code != http.StatusServiceUnavailable {
		t.Fatalf("connection %d of one trusted proxy, past its share of %d of the proxies' %d, answered %d (%v), want 503",
			share+1, share, most, code, err)
	}
	if _, err := r.ReadByte(); err == nil {
		t.Fatalf("a connection past its proxy's share was kept open after its 503")
	}
	for i := range most - share {
		c := dialFrom(t, fmt.Sprintf("127.0.8.%d", 2+i%3), url)
		if code, err := probe(c, bufio.NewReader(c)); code != http.StatusOK {
			t.Fatalf("connection %d of the other proxies, while one held its share, answered %d, %v", i+1, code, err)
		}
	}

	_ = held[0].Close()
	waitUntil(t, func() bool {
		c := dialFrom(t, proxyIP, url)
		code, _ := probe(c, bufio.NewReader(c))
		return code == http.StatusOK
	})
}
