package httpapi_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	httpapi "github.com/abi-engine/engine/adapters/primary/http"
)

// pipeListener hands the server the far ends of in-memory pipes, each
// from an address of its own. A write to a pipe returns once the server
// has read all of it, so a test knows what the server holds without
// waiting on time.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

type pipeConn struct {
	net.Conn
	remote net.Addr
}

func (c pipeConn) RemoteAddr() net.Addr { return c.remote }
func (c pipeConn) LocalAddr() net.Addr  { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80} }

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80} }

// dial opens a pipe to the server from the i-th address of 10.0.0.0/8.
func (l *pipeListener) dial(t *testing.T, i int) net.Conn {
	t.Helper()
	client, server := net.Pipe()
	t.Cleanup(func() { _ = client.Close() })
	addr := &net.TCPAddr{IP: net.IPv4(10, byte(i>>16), byte(i>>8), byte(i)), Port: 40000}
	select {
	case l.conns <- pipeConn{Conn: server, remote: addr}:
	case <-time.After(time.Minute):
		t.Fatalf("the server accepted no connection within a minute")
	}
	return client
}

// Every connection the API admits may hold a request's head while it
// arrives, for the 10 s it may take: whatever the head's shape, one holds
// at most MaxConnHeap of the engine's heap, which the deploy's memory
// design counts for each (deploy/kubernetes). net/http parses each field
// into a header map as it arrives, some 13 bytes of heap for each byte of
// short fields: a head of 20 KiB of them, within MaxHeaderBytes, held some
// 260 KiB; such a head is now answered 431 past MaxHeaderLines.
func TestAConnectionWhoseHeadArrivesHoldsAtMostMaxConnHeap(t *testing.T) {
	const conns = 256
	head := "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
	most := httpapi.MaxHeaderBytes + 4<<10 - 256 // the bytes net/http reads
	fields := func(n, bytes int) string {
		var b strings.Builder
		for i := 0; i < n && b.Len() < bytes-16; i++ {
			fmt.Fprintf(&b, "%x:\r\n", i)
		}
		return b.String()
	}
	long := func(before string) string {
		return before + "X-Pad: " + strings.Repeat("h", most-len(head)-len(before)-len("X-Pad: "))
	}
	n := httpapi.MaxHeaderLines - 2
	wide := "X-Pad: " + strings.Repeat("h", (most-len(head))/n-len("X-Pad: \r\n")) + "\r\n"
	for _, shape := range []struct {
		name    string
		pad     string
		refused bool
	}{
		{"one long field", long(""), false},
		{"the most fields, each long", strings.Repeat(wide, n), false},
		{"the most fields, short, then a long one", long(fields(n-1, most)), false},
		{"the most values of one field", strings.Repeat("A:\r\n", n), false},
		{"short fields up to the most bytes", fields(most, most-len(head)), true},
	} {
		t.Run(shape.name, func(t *testing.T) {
			e := &engine{}
			e.ready.Store(true)
			ln := &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
			s := httpapi.Serve(ln, httpapi.Options{Engine: e, Services: memoryServices(t),
				Logger: slog.New(slog.DiscardHandler), MaxClientConns: conns})
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = s.Shutdown(ctx)
			})
			base := heapInUse()
			readWhole := false
			for i := range conns {
				c := ln.dial(t, i)
				written, answer := make(chan error, 1), make(chan string, 1)
				go func() { _, err := io.WriteString(c, head+shape.pad); written <- err }()
				go func() {
					resp, err := http.ReadResponse(bufio.NewReaderSize(c, 16), nil)
					if err != nil {
						answer <- err.Error()
						return
					}
					_ = resp.Body.Close()
					answer <- resp.Status
				}()
				// A write to a pipe returns once the server has read it all.
				select {
				case err := <-written:
					if err != nil {
						t.Fatalf("connection %d: writing its head: %v", i, err)
					}
					readWhole = true
				case a := <-answer:
					if !shape.refused || !strings.HasPrefix(a, "431") {
						t.Fatalf("a head of %s, not ended, was answered %q", shape.name, a)
					}
				case <-time.After(time.Minute):
					t.Fatalf("connection %d: its head was neither read nor answered within a minute", i)
				}
			}
			if held := (heapInUse() - base) / conns; held > httpapi.MaxConnHeap {
				t.Fatalf("a connection whose head of %s arrives holds %d KiB, more than MaxConnHeap's %d KiB",
					shape.name, held>>10, httpapi.MaxConnHeap>>10)
			}
			if shape.refused && readWhole {
				t.Fatalf("a head of %s was read whole (%d lines), want 431 past %d lines",
					shape.name, strings.Count(head+shape.pad, "\n"), httpapi.MaxHeaderLines)
			}
		})
	}
}

// A head's lines are counted from its request line to its blank line, on
// every request of a connection: a body's line feeds are not, however
// many, and a later request's head past MaxHeaderLines is answered 431.
func TestOnlyAHeadsLinesAreCountedOnEveryRequestOfAConnection(t *testing.T) {
	url := serveReal(t, memoryServices(t), httpapi.Options{})
	c := dialFrom(t, "127.0.0.1", url)
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	r := bufio.NewReader(c)
	send := func(req string) int {
		t.Helper()
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	fields := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "X-%d: v\r\n", i)
		}
		return b.String()
	}
	body := strings.Repeat("\n", 4*httpapi.MaxHeaderLines)
	// The request line, Host, Content-Length and the fields: the most lines.
	put := fmt.Sprintf("PUT /v1/kv/lines HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n%s\r\n%s",
		len(body), fields(httpapi.MaxHeaderLines-3), body)
	for i := range 3 {
		if code := send(put); code != http.StatusNoContent {
			t.Fatalf("request %d of a connection, a head of %d lines and a body of %d line feeds, answered %d",
				i+1, httpapi.MaxHeaderLines, len(body), code)
		}
	}
	get := "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + fields(httpapi.MaxHeaderLines-1) + "\r\n"
	if code := send(get); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("a head of %d lines after three requests answered %d, want 431", httpapi.MaxHeaderLines+1, code)
	}
}

// A request sent before the answer to the one ahead of it (pipelined) has
// its head read with that one's bytes: its body, read after the answer
// ahead of it, is a body, however many lines it has, and is not refused
// as a head of too many lines.
func TestTheBodyOfAPipelinedRequestIsNotCountedAsAHead(t *testing.T) {
	url := serveReal(t, memoryServices(t), httpapi.Options{})
	c := dialFrom(t, "127.0.0.1", url)
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	body := strings.Repeat("x\n", 8*httpapi.MaxHeaderLines*4)
	both := "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" +
		fmt.Sprintf("PUT /v1/kv/piped HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	if _, err := io.WriteString(c, both); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	for i, want := range []int{http.StatusOK, http.StatusNoContent} {
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("answer %d: %v", i+1, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("answer %d of two pipelined requests, the second with a body of %d lines, is %d, want %d", i+1, strings.Count(body, "\n"), resp.StatusCode, want)
		}
	}
}
