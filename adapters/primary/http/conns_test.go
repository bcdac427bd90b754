package httpapi_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	httpapi "github.com/abi-engine/engine/adapters/primary/http"
)

// dialFrom opens a TCP connection to the API at base from the loopback
// address ip.
func dialFrom(t *testing.T, ip, base string) net.Conn {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 20 * time.Second}
	c, err := d.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// probe sends GET /healthz on c, keeping it open, and returns the answer's
// status, or the error that ended the connection instead.
func probe(c net.Conn, r *bufio.Reader) (int, error) {
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, err
	}
	if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
		return 0, errors.New("a 503 without a Retry-After")
	}
	return resp.StatusCode, nil
}

// One client holds at most its connections to the API: one more is
// answered 503 and closed, while another client connects and is answered. Each
// connection holds a goroutine and its buffers while it idles between
// requests, for two minutes; one client opening tens of thousands of them,
// as many as its ports allow, held a gigabyte of the engine's memory.
func TestOneClientHoldsOnlyItsShareOfTheConnections(t *testing.T) {
	const most = 64
	url := serveReal(t, memoryServices(t), httpapi.Options{})
	for i := range most {
		c := dialFrom(t, "127.0.7.1", url)
		if code, err := probe(c, bufio.NewReader(c)); code != http.StatusOK {
			t.Fatalf("connection %d of a client within its most answered %d, %v", i, code, err)
		}
	}
	c := dialFrom(t, "127.0.7.1", url)
	r := bufio.NewReader(c)
	if code, err := probe(c, r); code != http.StatusServiceUnavailable {
		t.Fatalf("connection %d of one client, past its most of %d, answered %d (%v), want 503", most+1, most, code, err)
	}
	if _, err := r.ReadByte(); err == nil {
		t.Fatalf("a connection past its client's most was kept open after its 503")
	}
	other := dialFrom(t, "127.0.7.2", url)
	if code, err := probe(other, bufio.NewReader(other)); code != http.StatusOK {
		t.Fatalf("another client's connection, while one held its most, answered %d, %v", code, err)
	}
}

// The clients that are not trusted proxies hold at most their connections
// all together: one more, from a client holding none, is answered 503 and
// closed, while a trusted proxy still connects, and a connection a client
// closes gives its place back. A client is bounded by its address, an IPv6
// one by its /64, and a home or a host given a /56 is 256 such clients:
// with no bound on all of them together, they reached the process's file
// limit and left the engine none for its backends.
func TestTheClientsHoldOnlyTheirConnectionsTogether(t *testing.T) {
	const most = 8
	url := serveReal(t, memoryServices(t), httpapi.Options{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.8.1/32")},
		MaxClientConns: most,
	})
	var held []net.Conn
	for i := range most {
		c := dialFrom(t, fmt.Sprintf("127.0.9.%d", 1+i), url)
		if code, err := probe(c, bufio.NewReader(c)); code != http.StatusOK {
			t.Fatalf("connection %d of the clients, within their most of %d, answered %d, %v", i+1, most, code, err)
		}
		held = append(held, c)
	}
	c := dialFrom(t, "127.0.9.100", url)
	r := bufio.NewReader(c)
	if code, err := probe(c, r); code != http.StatusServiceUnavailable {
		t.Fatalf("a connection of a client holding none, past the clients' most of %d, answered %d (%v), want 503", most, code, err)
	}
	if _, err := r.ReadByte(); err == nil {
		t.Fatalf("a connection past the clients' most was kept open after its 503")
	}
	proxy := dialFrom(t, "127.0.8.1", url)
	if code, err := probe(proxy, bufio.NewReader(proxy)); code != http.StatusOK {
		t.Fatalf("a trusted proxy, while the clients held their most, answered %d, %v", code, err)
	}

	_ = held[0].Close()
	waitUntil(t, func() bool {
		c := dialFrom(t, "127.0.9.100", url)
		code, _ := probe(c, bufio.NewReader(c))
		return code == http.StatusOK
	})
}
