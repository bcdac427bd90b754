package linearizable_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// links carries every connection the engines open to the broker, each
// over a link of its own, and stalls the links of one connection on
// demand: what either side sends on them waits in the link until it is
// let go, as on a connection that has stopped moving while the others
// go on. A connection is known by the name its client gives the broker
// when it connects.
type links struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	held   map[string]chan struct{} // connection name -> closed when let go
	conns  map[net.Conn]struct{}
	closed chan struct{}
	wg     sync.WaitGroup
}

// startLinks listens on a free loopback port for connections to target,
// and closes every link when the test ends.
func startLinks(t *testing.T, target string) *links {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("links: listen: %v", err)
	}
	l := &links{ln: ln, target: target, held: map[string]chan struct{}{}, conns: map[net.Conn]struct{}{}, closed: make(chan struct{})}
	l.wg.Go(l.accept)
	t.Cleanup(l.close)
	return l
}

// url is where the engines connect.
func (l *links) url() string { return "nats://" + l.ln.Addr().String() }

// stall holds every byte on the links of the connection named name, both
// ways, until letGo is called.
func (l *links) stall(name string) (letGo func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch, ok := l.held[name]
	if !ok {
		ch = make(chan struct{})
		l.held[name] = ch
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			delete(l.held, name)
			close(ch)
		})
	}
}

func (l *links) close() {
	_ = l.ln.Close()
	l.mu.Lock()
	close(l.closed)
	for c := range l.conns {
		_ = c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
}

func (l *links) accept() {
	for {
		client, err := l.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", l.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		l.mu.Lock()
		select {
		case <-l.closed:
			l.mu.Unlock()
			_ = client.Close()
			_ = server.Close()
			return
		default:
		}
		l.conns[client], l.conns[server] = struct{}{}, struct{}{}
		l.mu.Unlock()
		lk := &link{}
		l.wg.Go(func() { l.pipe(lk, client, server, server) })
		l.wg.Go(func() { l.pipe(lk, server, client, lk.named(client)) })
	}
}

// link is one connection: its name, once its client has sent it.
type link struct {
	mu   sync.Mutex
	name string
}

// named reads the client's first line, its CONNECT, learns the name from
// it, and returns a reader that starts with that line.
func (lk *link) named(client net.Conn) io.Reader {
	r := bufio.NewReader(client)
	line, _ := r.ReadString('\n') // an error comes again from r
	if cmd, ok := strings.CutPrefix(line, "CONNECT "); ok {
		var c struct{ Name string }
		if json.Unmarshal([]byte(cmd), &c) == nil {
			lk.mu.Lock()
			lk.name = c.Name
			lk.mu.Unlock()
		}
	}
	return io.MultiReader(strings.NewReader(line), r)
}

func (lk *link) nameOf() string {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return lk.name
}

// pipe copies src to dst, holding each chunk while the link is stalled;
// from is src, or a reader in front of it.
func (l *links) pipe(lk *link, dst, src net.Conn, from io.Reader) {
	defer func() {
		_ = dst.Close()
		_ = src.Close()
		l.mu.Lock()
		delete(l.conns, dst)
		delete(l.conns, src)
		l.mu.Unlock()
	}()
	buf := make([]byte, 64*1024)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			if !l.wait(lk) {
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

// wait returns once lk is not stalled, false when the links close first.
func (l *links) wait(lk *link) bool {
	name := lk.nameOf()
	l.mu.Lock()
	ch := l.held[name]
	l.mu.Unlock()
	if ch == nil || name == "" {
		return true
	}
	select {
	case <-ch:
		return true
	case <-l.closed:
		return false
	}
}
