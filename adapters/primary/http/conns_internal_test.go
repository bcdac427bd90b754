package httpapi

import (
	"io"
	"net"
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
	bounded := limitConns(ln, MaxConnsPerClient, MaxProxyConns, clients{})
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
