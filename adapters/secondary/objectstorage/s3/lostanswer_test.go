package s3_test

import (
	"bytes"
	"errors"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

// cutter stands between a store and the S3 server and forwards every
// connection as it is, except that it drops the answer to the first request
// whose first line matches drop: the server has done that request, the
// client sees its connection closed before any answer.
type cutter struct {
	target string
	drop   func(line string) bool
	mu     sync.Mutex
	done   bool                  // an answer was dropped, or is about to be
	sent   int                   // requests whose first line matched drop
	conns  map[net.Conn]struct{} // open, both sides
	cut    chan struct{}         // closed when the answer was dropped
}

// startCutter listens on a port of its own and forwards to the server at
// endpoint; it returns the endpoint to give the store instead. When the
// test ends, every connection closes.
func startCutter(t *testing.T, endpoint string, drop func(line string) bool) (string, *cutter) {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{target: u.Host, drop: drop, conns: map[net.Conn]struct{}{}, cut: make(chan struct{})}
	var pipes sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		c.mu.Lock()
		for conn := range c.conns {
			conn.Close()
		}
		c.mu.Unlock()
		pipes.Wait()
	})
	pipes.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			pipes.Go(func() { c.pipe(client) })
		}
	})
	return "http://" + ln.Addr().String(), c
}

// track keeps conn to be closed when the test ends.
func (c *cutter) track(conn net.Conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conns[conn] = struct{}{}
}

// requests is how many requests matched drop, the one whose answer was
// dropped and any sent after it.
func (c *cutter) requests() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent
}

// pipe forwards one connection. The client sends a request only once it
// has read the answer to the one before, so the bytes it sends after an
// answer begin a request, and their first line names it.
func (c *cutter) pipe(client net.Conn) {
	c.track(client)
	defer client.Close()
	server, err := net.Dial("tcp", c.target)
	if err != nil {
		return
	}
	c.track(server)
	defer server.Close()
	var (
		mu      sync.Mutex
		atStart = true // the next bytes from the client begin a request
		line    []byte // its first line so far
		drop    bool   // the answer to the request sent is to be dropped
	)
	go func() {
		defer server.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				mu.Lock()
				if atStart {
					line = append(line, buf[:n]...)
					if i := bytes.Index(line, []byte("\r\n")); i >= 0 {
						c.mu.Lock()
						if c.drop(string(line[:i])) {
							c.sent++
							if !c.done {
								c.done, drop = true, true
							}
						}
						c.mu.Unlock()
						atStart, line = false, nil
					}
				}
				mu.Unlock()
				if _, err := server.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			mu.Lock()
			dropping := drop
			atStart = true
			mu.Unlock()
			if dropping {
				close(c.cut)
				return // both connections close: the answer is lost
			}
			if _, err := client.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// A write whose answer is lost on the way back may have been done. The
// store must then say it does not know, never send it again: sent again, a
// put if absent finds its own object and is reported as having lost the
// race and a put if match finds the ETag it wrote itself: a put that
// stored its object is answered 409, which tells the caller it did not
// happen. A multipart upload's completion, conditions or none, is the
// same: sent again after the first published the object, it names an
// upload that is gone, which AWS answers NoSuchUpload: a put that stored
// its object would be answered 404.
// Here a proxy between the store and the server drops the answer to the
// request that publishes the object, and counts how often it is sent.
func TestAPutWhoseAnswerIsLostIsNotSentAgain(t *testing.T) {
	c := server(t)
	c.Bucket = newBucket(t, c)
	direct := open(t, c)
	cases := []struct {
		name    string
		key     string
		size    int
		opts    func(t *testing.T) ports.PutObjectOptions
		publish func(line string) bool // the request whose answer is dropped
	}{
		{
			name:    "put if absent",
			key:     "absent",
			size:    10,
			opts:    func(*testing.T) ports.PutObjectOptions { return ports.PutObjectOptions{IfAbsent: true} },
			publish: func(line string) bool { return strings.HasPrefix(line, "PUT ") && strings.Contains(line, "/absent") },
		},
		{
			name: "put if match",
			key:  "match",
			size: 10,
			opts: func(t *testing.T) ports.PutObjectOptions {
				info, err := direct.Put(t.Context(), "match", strings.NewReader("before"), ports.PutObjectOptions{})
				if err != nil {
					t.Fatal(err)
				}
				return ports.PutObjectOptions{IfMatch: info.ETag}
			},
			publish: func(line string) bool { return strings.HasPrefix(line, "PUT ") && strings.Contains(line, "/match") },
		},
		{
			name: "multipart put",
			key:  "parts",
			size: 12 << 20,
			opts: func(*testing.T) ports.PutObjectOptions { return ports.PutObjectOptions{} },
			publish: func(line string) bool {
				return strings.HasPrefix(line, "POST ") && strings.Contains(line, "/parts?uploadId=")
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts(t)
			endpoint, cut := startCutter(t, c.Endpoint, tc.publish)
			via := c
			via.Endpoint = endpoint
			s := open(t, via)
			content := bytes.Repeat([]byte("w"), tc.size)
			_, err := s.Put(t.Context(), tc.key, bytes.NewReader(content), opts)
			select {
			case <-cut.cut:
			case <-time.After(time.Minute):
				t.Fatalf("the answer to the publishing request was never dropped (Put: %v)", err)
			}
			if got := contracttests.ObjectContent(t, direct, tc.key); got != string(content) {
				t.Fatalf("the server did not store the Put whose answer was lost (%d bytes); the test could not cut where it meant to", len(got))
			}
			if errors.Is(err, ports.ErrConflict) || errors.Is(err, ports.ErrNotFound) {
				t.Fatalf("a Put that stored its object, whose answer was lost, was sent again and failed as if it had not happened: %v", err)
			}
			if n := cut.requests(); n != 1 {
				t.Fatalf("the request that publishes the object was sent %d times, want once (Put: %v)", n, err)
			}
		})
	}
}

// A Delete removes the object at the ETag it read (If-Match). Its request,
// once it may have reached the service, is not sent again: after the first
// deleted the object, a second finds no object at that ETag, which S3
// answers 404 or 412, and the Delete would report a key it removed as never
// there. Whatever the service makes of the second sending (versitygw
// ignores If-Match on a delete and answers it 204), the store sends the
// request once and, its answer lost, fails with an error of unknown
// outcome, never ErrNotFound.
func TestADeleteWhoseAnswerIsLostIsNotSentAgain(t *testing.T) {
	c := server(t)
	c.Bucket = newBucket(t, c)
	direct := open(t, c)
	if _, err := direct.Put(t.Context(), "gone", strings.NewReader("x"), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	endpoint, cut := startCutter(t, c.Endpoint, func(line string) bool {
		return strings.HasPrefix(line, "DELETE ") && strings.Contains(line, "/gone")
	})
	via := c
	via.Endpoint = endpoint
	s := open(t, via)
	err := s.Delete(t.Context(), "gone")
	select {
	case <-cut.cut:
	case <-time.After(time.Minute):
		t.Fatalf("the answer to the delete was never dropped (Delete: %v)", err)
	}
	if _, serr := direct.Stat(t.Context(), "gone"); !errors.Is(serr, ports.ErrNotFound) {
		t.Fatalf("Stat after the Delete whose answer was lost: %v, want ErrNotFound; the test could not cut where it meant to", serr)
	}
	if n := cut.requests(); n != 1 {
		t.Fatalf("the delete was sent %d times, want once (Delete: %v)", n, err)
	}
	if err == nil || errors.Is(err, ports.ErrNotFound) || errors.Is(err, ports.ErrConflict) {
		t.Fatalf("Delete whose answer was lost: %v, want an error of unknown outcome", err)
	}
}
