package httpapi

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// MaxConnsPerClient is how many connections one client (see clients)
// holds to the API at once; one more is answered 503, with a Retry-After,
// and closed (see refuse). Each
// connection holds a goroutine and its buffers, some 15 KiB, while it
// idles between requests for the server's idle time: a client opening as
// many as its ports allowed, some 28,000 from one IPv4 address, held some
// 400 MiB of the memory the engine's NATS callers share. 64 is well past
// what a client's requests in flight and transfers need together.
const MaxConnsPerClient = 64

// MaxClientConns is how many connections the clients that are not
// trusted proxies hold to the API at once, all of them together, unless
// configured otherwise; one more is answered 503, with a Retry-After, and
// closed, as one past a client's most is. The bound per client keys an
// IPv6 address by its /64, but a home or a host is often given a /56: 256
// such clients, 16,384 connections at 64 each, some 240 MiB at 15 KiB
// each, and past many a process's file limit, which left the engine no
// descriptor for its backends, its NATS connection or its files. 4096
// hold some 60 MiB, as the trusted proxies' MaxProxyConns do, and both
// are lowered to fit the process's file limit (see limitsFor).
const MaxClientConns = 4096

// MaxProxyConns is how many connections the trusted proxies hold to the
// API at once, all of them together, unless configured otherwise; one
// more is answered 503, with a Retry-After, and closed, as one past a
// client's most is. A proxy's connections carry many clients' requests,
// so they are not bounded per client, but a trusted range is often wide
// (an ingress controller's whole pod range), and any host in it opened as
// many as its ports allowed, some 400 MiB of the engine's memory from one
// address. 4096 hold some 60 MiB, and are more than ingress-nginx keeps
// idle to one upstream (320 a worker process) on a few replicas of a few
// workers each. One proxy address holds at most a ProxyShareDivisor part
// of them, unless configured otherwise.
const MaxProxyConns = 4096

// ProxyShareDivisor is the part of the trusted proxies' connections that
// one of their addresses holds, unless configured otherwise, when a
// trusted range is wider than one address: a quarter, as a client's
// shares are. Such a range is often an ingress's whole pod range, and one
// host in it that opened all it could filled the proxies' one bound and
// had the real ingress's connections refused; now it leaves them three
// quarters, unless it holds several addresses of the range (an IPv6 host
// may hold a /64 of them). When every trusted proxy is named by its one
// address, nothing else can open a proxy's connections, and one proxy may
// hold them all: a single ingress with many workers keeps more than a
// quarter idle.
const ProxyShareDivisor = 4

// FileLimitDivisor is the part of the process's file limit that the API's
// connections, the clients' and the proxies' together, take at most: each
// bound is lowered to a 2*FileLimitDivisor part of the limit when it is
// above it, so half the process's descriptors are left to the engine.
const FileLimitDivisor = 2

// maxRefusing is how many connections past their client's most are
// answered at once; past that, one is closed without an answer, so a
// flood of connections costs no more than this many goroutines.
const maxRefusing = 64

// refuseTime bounds how long a refused connection is read and answered.
const refuseTime = 2 * time.Second

// connLimits are the bounds of a clientConns.
type connLimits struct {
	// perClient bounds one client's connections, clients those of all
	// the clients that are not trusted proxies together.
	perClient, clients int
	// perProxy bounds one trusted proxy address's connections, proxies
	// those of all the trusted proxies together.
	perProxy, proxies int
}

// limitsFor is the bounds of the API's connections, given those asked for
// of all the clients' connections together (clients), all the proxies'
// (proxies) and one proxy address's (perProxy, when <= 0 the proxies'
// bound if every trusted proxy is named by its one address, named, and a
// ProxyShareDivisor part of it, at least one, if not), in a process whose
// file limit is files (0 when it is not known): each of the first two is
// lowered to a
// 2*FileLimitDivisor part of files when it is above it, at least one, and
// a proxy's is at most the proxies'. lowered tells whether one was.
func limitsFor(clients, proxies, perProxy int, named bool, files uint64) (l connLimits, lowered bool) {
	if files > 0 {
		most := max(int(min(files/(2*FileLimitDivisor), 1<<30)), 1)
		if clients > most {
			clients, lowered = most, true
		}
		if proxies > most {
			proxies, lowered = most, true
		}
	}
	switch {
	case perProxy > 0:
	case named:
		perProxy = proxies
	default:
		perProxy = max(proxies/ProxyShareDivisor, 1)
	}
	return connLimits{
		perClient: min(MaxConnsPerClient, clients), clients: clients,
		perProxy: min(perProxy, proxies), proxies: proxies,
	}, lowered
}

// clientConns is a listener whose connections are bounded by client, and
// all the clients' together, but the trusted proxies', which are bounded
// by proxy address and all together: one proxy's connections carry many clients' requests, and
// their headers, which name the clients, are not read yet. The clients
// and the proxies have bounds apart, so a flood of either leaves the
// other its connections.
type clientConns struct {
	net.Listener
	limits  connLimits
	clients clients

	mu       sync.Mutex
	by       map[string]int
	direct   int
	byProxy  map[netip.Addr]int
	proxied  int
	refusing int
}

func limitConns(ln net.Listener, limits connLimits, clients clients) *clientConns {
	return &clientConns{Listener: ln, limits: limits, clients: clients, by: map[string]int{}, byProxy: map[netip.Addr]int{}}
}

// Accept returns the next connection of a client within its most and the
// clients' together, or of a trusted proxy within its most and the
// proxies' together, and closes those past them.
func (l *clientConns) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if a, ok := remoteIP(c.RemoteAddr().String()); ok && l.clients.trusts(a) {
			if why := l.takeProxied(a); why != "" {
				l.refuse(c, why)
				continue
			}
			return &clientConn{Conn: c, release: sync.OnceFunc(func() { l.releaseProxied(a) })}, nil
		}
		client := clientAt(c.RemoteAddr().String())
		if why := l.take(client); why != "" {
			l.refuse(c, why)
			continue
		}
		return &clientConn{Conn: c, release: sync.OnceFunc(func() { l.release(client) })}, nil
	}
}

// take counts a connection of client, and says why it is refused when it
// is past a bound, counting nothing.
func (l *clientConns) take(client string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.by[client] >= l.limits.perClient:
		return fmt.Sprintf("this client holds %d connections to this API, the most one client holds; "+
			"reuse them, or try again later", l.limits.perClient)
	case l.direct >= l.limits.clients:
		return fmt.Sprintf("the clients hold %d connections to this API, the most they hold together; "+
			"try again later", l.limits.clients)
	}
	l.by[client]++
	l.direct++
	return ""
}

// takeProxied counts a connection of the trusted proxy at a, and says why
// it is refused when it is past a bound, counting nothing. A proxy is its
// exact address, an IPv6 one too: the operator lists the proxies, and
// pods of one node often share a /64.
func (l *clientConns) takeProxied(a netip.Addr) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.byProxy[a] >= l.limits.perProxy:
		return fmt.Sprintf("this trusted proxy holds %d connections to this API, the most one proxy address holds "+
			"of the %d the trusted proxies hold together; reuse them, or try again later",
			l.limits.perProxy, l.limits.proxies)
	case l.proxied >= l.limits.proxies:
		return fmt.Sprintf("the trusted proxies hold %d connections to this API, the most they hold together; "+
			"reuse them, or try again later", l.limits.proxies)
	}
	l.byProxy[a]++
	l.proxied++
	return ""
}

// refuse answers c's first request 503, saying why, and closes it, in a goroutine of
// its own for at most refuseTime, or closes it at once when maxRefusing
// are being answered. The request is read before the answer is written,
// and the connection half-closed and read to its end before it closes, so
// the client reads the answer rather than a reset.
func (l *clientConns) refuse(c net.Conn, why string) {
	l.mu.Lock()
	answer := l.refusing < maxRefusing
	if answer {
		l.refusing++
	}
	l.mu.Unlock()
	if !answer {
		_ = c.Close()
		return
	}
	go func() {
		defer func() {
			_ = c.Close()
			l.mu.Lock()
			l.refusing--
			l.mu.Unlock()
		}()
		_ = c.SetDeadline(time.Now().Add(refuseTime))
		r := bufio.NewReader(io.LimitReader(c, MaxHeaderBytes))
		if _, err := http.ReadRequest(r); err != nil {
			return
		}
		body, _ := json.Marshal(errorBody{Error: errorDetail{Code: http.StatusServiceUnavailable, Message: why}})
		_, err := fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"+
			"X-Content-Type-Options: nosniff\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
			len(body), body)
		if err != nil {
			return
		}
		if tcp, ok := c.(interface{ CloseWrite() error }); ok {
			_ = tcp.CloseWrite()
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(c, MaxHeaderBytes))
	}()
}

func (l *clientConns) release(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.direct--
	if l.by[client]--; l.by[client] <= 0 {
		delete(l.by, client)
	}
}

func (l *clientConns) releaseProxied(a netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.proxied--
	if l.byProxy[a]--; l.byProxy[a] <= 0 {
		delete(l.byProxy, a)
	}
}

// MaxHeaderLines bounds the lines of a request's head, its request line
// and header fields together; the connection of a request with more is
// answered 431 and closed. net/http bounds a head only by its bytes
// (MaxHeaderBytes), but parses each field into its header map as it
// arrives, some 13 bytes of heap for each byte of short lines ("a:"):
// 20 KiB of them held some 260 KiB of heap on each connection while the
// head arrived, 2.1 GiB for the 8192 connections the API admits. The
// largest request the API serves has about a dozen fields, a browser's a
// few dozen.
const MaxHeaderLines = 128

// MaxConnHeap is the most of the heap a connection holds while a request
// head arrives, of any shape within MaxHeaderBytes and MaxHeaderLines: its
// buffers and the head read so far, some 29 KiB measured for one long
// field (35 KiB under the race detector), besides its goroutine's stack,
// some 8 KiB; an idle one holds some 13 KiB of heap. The deploy's memory
// design counts both for every connection the API admits.
const MaxConnHeap = 40 << 10

// headLines counts the lines of the request head arriving on a
// connection, from the connection's start or its last answer (see
// Server's ConnState) to the head's blank line; the bytes after it, a
// body's, are not looked at.
type headLines struct {
	mu sync.Mutex
	// arriving tells whether a head is arriving; lines counts its lines
	// ended so far, and open the bytes of the line not yet ended.
	arriving    bool
	lines, open int
}

// next starts counting the next request's head.
func (h *headLines) next() {
	h.mu.Lock()
	h.arriving, h.lines, h.open = true, 0, 0
	h.mu.Unlock()
}

// done stops counting: the head has been read.
func (h *headLines) done() {
	h.mu.Lock()
	h.arriving = false
	h.mu.Unlock()
}

// read counts the lines of b, bytes read from the connection, and tells
// whether the head they belong to has more than MaxHeaderLines. A line
// ends at a line feed, as net/http reads it, and the first empty one
// after a line that is not ends the head.
func (h *headLines) read(b []byte) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range b {
		if !h.arriving {
			return false
		}
		switch c {
		case '\n':
			if h.open == 0 && h.lines > 0 {
				h.arriving = false
				continue
			}
			if h.open > 0 {
				h.lines++
			}
			h.open = 0
			if h.lines > MaxHeaderLines {
				return true
			}
		case '\r':
		default:
			h.open++
		}
	}
	return false
}

// errTooManyLines ends the reading of a head of more than MaxHeaderLines;
// it is a read's net.OpError, so that net/http closes the connection
// without an answer of its own, after the 431 tooManyLines wrote.
var errTooManyLines = errors.New("the request's head has more lines than the API reads")

// clientConn gives its client's place back when it closes, and answers
// 431 to a request whose head has more than MaxHeaderLines.
type clientConn struct {
	net.Conn
	release func()
	head    headLines
}

func (c *clientConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.head.read(b[:n]) {
		_ = c.Conn.SetWriteDeadline(time.Now().Add(refuseTime))
		_, _ = io.WriteString(c.Conn, "HTTP/1.1 431 Request Header Fields Too Large\r\n"+
			"Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"+
			"431 Request Header Fields Too Large: more than "+strconv.Itoa(MaxHeaderLines)+" lines")
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: errTooManyLines}
	}
	return n, err
}

// connState starts counting a head's lines on a connection that has just
// been accepted or has answered a request: the next bytes it reads are a
// request's head, unless the head was read already, with the request
// ahead of it (pipelined). So it also stops counting once net/http has
// read a request's head (StateActive): what the connection reads then is
// that request's body, however many lines it has.
func connState(c net.Conn, s http.ConnState) {
	cc, ok := c.(*clientConn)
	if !ok {
		return
	}
	switch s {
	case http.StateNew, http.StateIdle:
		cc.head.next()
	case http.StateActive:
		cc.head.done()
	}
}

func (c *clientConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}

// CloseWrite half-closes the connection when it can (TCP can). net/http
// does so before it closes a connection whose request body it did not
// read, such as one refused 413 for its declared length, and waits a
// moment, so that a client still sending reads the answer rather than a
// reset: hidden behind the wrapper, it sent no half-close.
func (c *clientConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// addressesOnly tells whether every prefix names one address.
func addressesOnly(prefixes []netip.Prefix) bool {
	for _, p := range prefixes {
		if !p.IsSingleIP() {
			return false
		}
	}
	return true
}
