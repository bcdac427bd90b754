// Package tcpproxy forwards loopback TCP connections to a server and can
// stall them, so tests cut a client off from a real nats-server without
// touching either.
package tcpproxy

import (
	"bytes"
	"encoding/json"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards every connection it accepts to a target address.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	blocked bool
	down    bool                     // connections are closed as they come, as by a broker that is down
	resumed chan struct{}            // closed when a block ends
	named   map[string]chan struct{} // client name -> closed when its block ends
	closed  chan struct{}            // closed by Close: every block ends
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
	p := &Proxy{
		ln:      ln,
		target:  target,
		named:   map[string]chan struct{}{},
		closed:  make(chan struct{}),
		conns:   map[net.Conn]struct{}{},
		changed: make(chan struct{}),
	}
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

// BlockNamed stalls every byte in both directions, as Block does, but only
// on the connections whose client gave name in its NATS CONNECT
// (nats.Name), until UnblockNamed with the same name: the proxy's other
// connections go on, as when one of a process's connections to the broker
// stops moving while its others do not. A connection that later names
// itself so is stalled too, from its CONNECT on. The proxy learns a name
// from the CONNECT as it forwards it, never holding bytes back to do so;
// a client that sends no CONNECT in the clear, as over TLS, has no name.
// An empty name is refused with a panic: it would stall nothing.
func (p *Proxy) BlockNamed(name string) {
	if name == "" {
		panic("tcpproxy: BlockNamed with an empty name")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.named[name]; !ok {
		p.named[name] = make(chan struct{})
	}
}

// UnblockNamed lets the bytes BlockNamed(name) stalled through and resumes
// forwarding on those connections. It does nothing for a name not blocked.
func (p *Proxy) UnblockNamed(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ch, ok := p.named[name]; ok {
		delete(p.named, name)
		close(ch)
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

// Close stops listening and closes every connection; the bytes a block
// holds are dropped with them.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	select {
	case <-p.closed:
	default:
		close(p.closed)
	}
	p.mu.Unlock()
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
		select {
		case <-p.closed:
			// Close has closed the connections it knew of: these would
			// stay open, and Close wait on their pipes.
			p.mu.Unlock()
			_ = client.Close()
			_ = server.Close()
			return
		default:
		}
		p.conns[client], p.conns[server] = struct{}{}, struct{}{}
		p.count()
		p.mu.Unlock()
		lk := &link{}
		p.wg.Go(func() { p.pipe(lk, server, client, true) })
		p.wg.Go(func() { p.pipe(lk, client, server, false) })
	}
}

// link is one forwarded connection, both ways.
type link struct {
	// name is what the client named itself in its CONNECT, once seen.
	name atomic.Pointer[string]
	// first holds the client's bytes before its first line ends, while
	// they are looked at; only the pipe from the client touches it.
	first  []byte
	looked bool
}

// maxConnectLine is how much of the client's first line is looked at for
// its name: a CONNECT carrying a user JWT runs to a few KiB.
const maxConnectLine = 64 << 10

// see looks at a chunk from the client, for the name in its CONNECT, the
// client's first line.
func (lk *link) see(chunk []byte) {
	if lk.looked {
		return
	}
	end := bytes.IndexByte(chunk, '\n')
	if end < 0 {
		lk.first = append(lk.first, chunk...)
		if len(lk.first) > maxConnectLine {
			lk.looked, lk.first = true, nil
		}
		return
	}
	line := append(lk.first, chunk[:end]...)
	lk.looked, lk.first = true, nil
	cmd, ok := bytes.CutPrefix(line, []byte("CONNECT "))
	if !ok {
		return
	}
	var c struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(cmd, &c) == nil && c.Name != "" {
		lk.name.Store(&c.Name)
	}
}

func (lk *link) nameOf() string {
	if n := lk.name.Load(); n != nil {
		return *n
	}
	return ""
}

// pipe copies from src to dst, holding each chunk while the link is
// blocked; fromClient says src is the client, whose CONNECT names the link.
func (p *Proxy) pipe(lk *link, dst, src net.Conn, fromClient bool) {
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
			if fromClient {
				lk.see(buf[:n])
			}
			if !p.waitOpen(lk) {
				return
			}
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

// waitOpen returns once neither Block nor a BlockNamed of lk's name holds
// lk, false when the proxy closes first.
func (p *Proxy) waitOpen(lk *link) bool {
	name := lk.nameOf()
	for {
		p.mu.Lock()
		var held chan struct{}
		if p.blocked {
			held = p.resumed
		} else if name != "" {
			held = p.named[name]
		}
		p.mu.Unlock()
		if held == nil {
			return true
		}
		select {
		case <-held:
		case <-p.closed:
			return false
		}
	}
}
