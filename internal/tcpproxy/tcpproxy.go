// Package tcpproxy forwards loopback TCP connections to a server and can
// stall them, so tests cut a client off from a real nats-server without
// touching either.
package tcpproxy

import (
	"net"
	"sync"
	"testing"
)

// Proxy forwards every connection it accepts to a target address.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	blocked bool
	down    bool          // connections are closed as they come, as by a broker that is down
	resumed chan struct{} // closed when a block ends
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
	// accepted counts the connections accepted so far, those closed at
	// once while down included; changed tells of each new one.
	accepted int
	changed  chan struct{}
}

// Start listens on a free loopback port and stops when the test ends.
func Start(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("proxy listen: %v", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, changed: make(chan struct{})}
	p.wg.Go(p.accept)
	tb.Cleanup(p.Close)
	return p
}

// Addr is where clients connect.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Block stalls every byte in both directions until Unblock: the connections
// stay open and silent, as across a partition.
func (p *Proxy) Block() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.blocked {
		p.blocked, p.resumed = true, make(chan struct{})
	}
}

// Unblock lets the stalled bytes through and resumes forwarding.
func (p *Proxy) Unblock() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.blocked {
		p.blocked = false
		close(p.resumed)
	}
}

// Drop closes every open connection, as when a link resets.
func (p *Proxy) Drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

// Accepted is how many connections the proxy has accepted so far.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// AwaitAccepted waits until the proxy has accepted more than n connections
// in all, those Down closed at once included, and reports whether it did
// before done closed: a client cut off dials again when it reconnects.
func (p *Proxy) AwaitAccepted(n int, done <-chan struct{}) bool {
	for {
		p.mu.Lock()
		accepted, changed := p.accepted, p.changed
		p.mu.Unlock()
		if accepted > n {
			return true
		}
		select {
		case <-changed:
		case <-done:
			return false
		}
	}
}

// Down closes every open connection and, until Up, every new one as soon
// as it is accepted, as a broker that is down refuses its clients: a
// client's reconnects fail at once, and it waits between them.
func (p *Proxy) Down() {
	p.mu.Lock()
	p.down = true
	p.mu.Unlock()
	p.Drop()
}

// Up forwards new connections again after Down.
func (p *Proxy) Up() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

// Close stops listening and closes every connection.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.Unblock()
	p.Drop()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		if down {
			p.count()
		}
		p.mu.Unlock()
		if down {
			_ = client.Close()
			continue
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.conns[client], p.conns[server] = struct{}{}, struct{}{}
		p.count()
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(server, client) })
		p.wg.Go(func() { p.pipe(client, server) })
	}
}

// pipe copies from src to dst, holding each chunk while the proxy is blocked.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer func() {
		_ = dst.Close()
		_ = src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.waitOpen()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// count notes one more connection accepted; p.mu is held.
func (p *Proxy) count() {
	p.accepted++
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Proxy) waitOpen() {
	p.mu.Lock()
	blocked, resumed := p.blocked, p.resumed
	p.mu.Unlock()
	if blocked {
		<-resumed
	}
}
