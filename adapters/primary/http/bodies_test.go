package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	httpapi "github.com/abi-engine/engine/adapters/primary/http"
)

// serveReal serves the API as the engine does, with its server's timeouts,
// on a port of its own on 127.0.0.1.
func serveReal(t *testing.T, services httpapi.Services, o httpapi.Options) string {
	t.Helper()
	e := &engine{}
	e.ready.Store(true)
	o.Engine, o.Services = e, services
	o.Logger = slog.New(slog.DiscardHandler)
	ln, err := httpapi.Bind("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := httpapi.Serve(ln, o)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return "http://" + s.Addr()
}

// clientFrom is an HTTP client whose connections come from ip, a loopback
// address, so that one test can be many clients. It sends a body only once
// the API asks for it (Expect: 100-continue, see send), as a client should
// that wants a refusal of its body told reliably.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{Transport: &http.Transport{
		DialContext: d.DialContext, DisableKeepAlives: true, ExpectContinueTimeout: time.Minute,
	}}
}

// heldBody sends all of data but its last byte, and the last once
// released: the server holds what it has read of it until then.
type heldBody struct {
	data    []byte
	off     int
	release <-chan struct{}
}

func (b *heldBody) Read(p []byte) (int, error) {
	end := len(b.data) - 1
	if b.off == end {
		<-b.release
		end = len(b.data)
	}
	if b.off == len(b.data) {
		return 0, io.EOF
	}
	n := copy(p, b.data[b.off:end])
	b.off += n
	return n, nil
}

// answer is what a request got: its status (0 when it failed), its
// Retry-After and its body.
type answer struct {
	code       int
	retryAfter string
	body       string
}

// send PUTs body to url as client, declaring length (-1: none, so it is
// sent chunked), and answers on the channel returned.
func send(client *http.Client, url string, body io.Reader, length int64) <-chan answer {
	done := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, "PUT", url, body)
		if err != nil {
			done <- answer{}
			return
		}
		req.ContentLength = length
		req.Header.Set("Expect", "100-continue")
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

// heapInUse is the bytes the heap holds live, after a collection.
func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// Many clients sending bodies at once hold no more of the engine's memory
// than the API's budget of bodies: a body is reserved as it arrives, and
// one that would grow past the budget is refused 503 with a Retry-After
// (or its connection cut, when the refusal came while its client was
// still sending it) and frees what it held, so the bodies left are read
// whole and stored. Each body here stops a byte short until the end, so
// every one of them is in flight at once: the API used to read them all,
// and held every one. What the bodies hold is measured once the heap has
// settled, since a buffer that grows leaves the one it grew out of to the
// collector.
func TestBodiesInFlightHoldNoMoreThanTheAPIsBudget(t *testing.T) {
	const (
		size    = 1 << 20
		budget  = 8 << 20
		clients = 24
		fit     = budget / size
	)
	_, services := kernel(t, nil)
	url := serveReal(t, services, httpapi.Options{MaxBody: size, BodyBudget: budget})
	data := bytes.Repeat([]byte("b"), size)
	release := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})

	base := heapInUse()
	answers := make(chan answer, clients)
	for i := range clients {
		client := clientFrom(fmt.Sprintf("127.0.1.%d", i+1))
		got := send(client, fmt.Sprintf("%s/v1/kv/held-%d", url, i), &heldBody{data: data, release: release}, size)
		go func() { answers <- <-got }()
	}
	refusedOrCut := func(a answer) bool {
		if a.code == 0 {
			return true
		}
		return a.code == http.StatusServiceUnavailable && a.retryAfter != "" && strings.Contains(a.body, "try again later")
	}

	// No more than fit bodies can be held whole, so at least the rest are
	// refused; wait for them, and for the heap to settle.
	var refused int
	held, last := int64(-1), int64(-1)
	deadline := time.After(45 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for held < 0 {
		select {
		case a := <-answers:
			if !refusedOrCut(a) {
				t.Fatalf("a body still short of its end answered %d (Retry-After %q): %s", a.code, a.retryAfter, a.body)
			}
			refused++
		case <-tick.C:
			now := heapInUse() - base
			if refused >= clients-fit && last >= 0 && now-last < 256<<10 && last-now < 256<<10 {
				held = now
			}
			last = now
		case <-deadline:
			t.Fatalf("after 45s %d of %d requests were refused, and the heap had not settled (%d MiB past the start): want at least %d refused",
				refused, clients, last>>20, clients-fit)
		}
	}
	// The slack is the rest of the process: the broker, the host, the
	// clients, and answers under way.
	if held > budget+8<<20 {
		t.Fatalf("%d requests in flight held %d MiB once settled, past the API's budget of %d MiB (%d refused)",
			clients, held>>20, budget>>20, refused)
	}

	close(release)
	stored := 0
	for range clients - refused {
		select {
		case a := <-answers:
			switch {
			case a.code == http.StatusNoContent:
				stored++
			case !refusedOrCut(a):
				t.Fatalf("a body answered %d once whole: %s", a.code, a.body)
			}
		case <-time.After(45 * time.Second):
			t.Fatalf("the bodies left did not answer within 45s")
		}
	}
	if stored == 0 || stored > fit {
		t.Fatalf("%d of %d bodies were stored, want 1 to %d", stored, clients, fit)
	}
	got := send(clientFrom("127.0.1.1"), url+"/v1/kv/after", bytes.NewReader(data), size)
	if a := <-got; a.code != http.StatusNoContent {
		t.Fatalf("a request once the bodies were stored answered %d: %s", a.code, a.body)
	}
}

// One client's bodies in flight hold at most its share of the budget; its
// requests past it are refused 503, naming the share, while another
// client's body is read and stored. A body of 64 KiB or less is reserved
// whole once the API asks for it, so the client's share is full once it
// has been asked for two.
func TestOneClientHoldsOnlyItsShareOfTheBodyBudget(t *testing.T) {
	const (
		size  = 64 << 10
		share = 2 * size
		sent  = 6
	)
	_, services := kernel(t, nil)
	url := serveReal(t, services, httpapi.Options{MaxBody: size, BodyBudget: 8 << 20, BodyShare: share})
	data := bytes.Repeat([]byte("s"), size)

	var held []net.Conn
	for i := range share / size {
		held = append(held, declareAndTrickle(t, url, "127.0.2.1", fmt.Sprintf("/v1/kv/greedy-%d", i), size, 0))
	}
	greedy := clientFrom("127.0.2.1")
	for i := range sent - share/size {
		a := <-send(greedy, fmt.Sprintf("%s/v1/kv/past-%d", url, i), bytes.NewReader(data), size)
		if a.code != http.StatusServiceUnavailable || a.retryAfter == "" || !strings.Contains(a.body, "share") {
			t.Fatalf("a client past its share got %d (Retry-After %q): %s", a.code, a.retryAfter, a.body)
		}
	}

	bystander := clientFrom("127.0.2.2")
	if a := <-send(bystander, url+"/v1/kv/bystander", bytes.NewReader(data), size); a.code != http.StatusNoContent {
		t.Fatalf("a bystander's PUT, while another client held its share, answered %d: %s", a.code, a.body)
	}
	for _, conn := range held {
		if _, err := conn.Write(data); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("no answer to a body within the client's share once sent whole: %v", err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("a request within the client's share answered %d", resp.StatusCode)
		}
	}
}

// A body declared larger than the API reads whole is refused 413 at once,
// before a byte of it is read: it used to be read up to the most first,
// and a client that declared it and sent nothing held its request until
// the server's time for a request ran out.
func TestABodyDeclaredOverTheMostIsRefusedBeforeItIsRead(t *testing.T) {
	_, services := kernel(t, nil)
	url := serveReal(t, services, httpapi.Options{MaxBody: 1 << 20})
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := fmt.Fprintf(conn, "PUT /v1/kv/big HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n", 2<<20); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a body declared over the most, sent not at all, within 20s: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "over 1048576 bytes") {
		t.Fatalf("a body declared over the most answered %d: %s", resp.StatusCode, b)
	}
}

// A body of no declared length (sent chunked) is read within the most and
// under the client's share as it grows: one of the most is stored, one a
// byte over is 413, and one that grows past what the client's share has
// left is 503.
func TestAChunkedBodyIsBoundedByTheMostAndTheShare(t *testing.T) {
	const size = 1 << 20
	_, services := kernel(t, nil)
	url := serveReal(t, services, httpapi.Options{MaxBody: size, BodyBudget: 8 << 20, BodyShare: size})
	data := bytes.Repeat([]byte("c"), size+1)
	client := clientFrom("127.0.3.1")
	chunked := func(b []byte) io.Reader { return io.MultiReader(bytes.NewReader(b)) }

	if a := <-send(client, url+"/v1/kv/chunked", chunked(data[:size]), -1); a.code != http.StatusNoContent {
		t.Fatalf("a chunked body of the most answered %d: %s", a.code, a.body)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url+"/v1/kv/chunked", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if !bytes.Equal(got, data[:size]) {
		t.Fatalf("a chunked body was stored as %d bytes, want %d", len(got), size)
	}
	if a := <-send(client, url+"/v1/kv/chunked", chunked(data), -1); a.code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a chunked body a byte over the most answered %d: %s", a.code, a.body)
	}

	// A body declared of 64 KiB or less is reserved whole once the API
	// asks for it; a chunked body is then refused as soon as it grows past
	// what is left of the client's share. Refused 64 KiB short of its end,
	// it has less left than the server reads past a refusal, so the
	// connection is not reset under it.
	const small = 64 << 10
	held := declareAndTrickle(t, url, "127.0.3.1", "/v1/kv/held", small, 0)
	if a := <-send(client, url+"/v1/kv/grows", chunked(data[:size]), -1); a.code != http.StatusServiceUnavailable || a.retryAfter == "" {
		t.Fatalf("a chunked body past the client's share answered %d (Retry-After %q): %s", a.code, a.retryAfter, a.body)
	}
	if _, err := held.Write(bytes.Repeat([]byte("h"), small)); err != nil {
		t.Fatal(err)
	}
	resp, err = http.ReadResponse(bufio.NewReader(held), nil)
	if err != nil {
		t.Fatalf("no answer to the held body once sent whole: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("the held body answered %d", resp.StatusCode)
	}
}

// A body that stops arriving is cut off 408 once it has sent nothing for
// the stall time, and frees what it held of its client's share, so the
// client's next body is read. It used to hold its reservation, of the
// whole length it declared, for the minute a request may take, sending
// nothing: four clients so held the API's whole budget of bodies.
func TestABodyThatStallsIsCutOffAndFreesItsShare(t *testing.T) {
	const size = 1 << 20
	_, services := kernel(t, nil)
	url := serveReal(t, services, httpapi.Options{MaxBody: size, BodyBudget: 4 * size, BodyShare: size})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })

	client := clientFrom("127.0.2.9")
	stalled := send(client, url+"/v1/kv/stalled", &heldBody{data: bytes.Repeat([]byte("s"), size), release: release}, size)
	select {
	case a := <-stalled:
		if a.code != http.StatusRequestTimeout && a.code != 0 {
			t.Fatalf("a body that stopped arriving answered %d, want 408 or a cut connection: %s", a.code, a.body)
		}
	case <-time.After(40 * time.Second):
		t.Fatalf("a body that sent nothing more was not cut off within 40s; it holds its client's share meanwhile")
	}
	if a := <-send(client, url+"/v1/kv/next", bytes.NewReader(bytes.Repeat([]byte("n"), size)), size); a.code != http.StatusNoContent {
		t.Fatalf("the client's next body, once its stalled one was cut off, answered %d: %s", a.code, a.body)
	}
}

// slowBody sends data a piece every tick, as a client on a slow link does,
// until it has sent it all or stop closes. started closes at its first
// read: the client sends its body only once the API has reserved room for
// it and asks for it (Expect: 100-continue).
type slowBody struct {
	data    []byte
	piece   int
	tick    *time.Ticker
	stop    <-chan struct{}
	started chan struct{}
}

func (b *slowBody) Read(p []byte) (int, error) {
	select {
	case <-b.started:
	default:
		close(b.started)
	}
	if len(b.data) == 0 {
		return 0, io.EOF
	}
	select {
	case <-b.tick.C:
	case <-b.stop:
		return 0, io.ErrUnexpectedEOF
	}
	n := copy(p[:min(len(p), b.piece)], b.data)
	b.data = b.data[n:]
	return n, nil
}

// A body that arrives above the minimum rate, but too slowly to arrive
// whole within the time for a request, is cut off once its reads have
// waited the stall time, and frees what it held of its client's share.
// It holds only about what it has sent meanwhile, so another body of the
// client is read. It used to hold its reservation, of the whole length it
// declared, for the minute a request may take, and fail then all the
// same: a client sending 8 KiB/s held 8 MiB of the API's budget for that
// minute, and eight such bodies from four addresses held the whole budget
// for 64 KiB/s in all.
func TestABodyTooSlowToArriveInTimeIsCutOffAndFreesItsShare(t *testing.T) {
	const size = 2 << 20 // needs some 35 KiB/s to arrive within the minute
	_, services := kernel(t, nil)
	url := serveReal(t, services, httpapi.Options{MaxBody: size, BodyBudget: 4 * size, BodyShare: size})
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	// 2 KiB every 100 ms: some 20 KiB/s, well above the minimum rate.
	tick := time.NewTicker(100 * time.Millisecond)
	t.Cleanup(tick.Stop)
	slow := &slowBody{data: bytes.Repeat([]byte("s"), size), piece: 2 << 10, tick: tick, stop: stop, started: make(chan struct{})}

	client := clientFrom("127.0.2.10")
	trickled := send(client, url+"/v1/kv/slow", slow, size)
	select {
	case <-slow.started:
	case a := <-trickled:
		t.Fatalf("the slow body answered %d before it was asked for: %s", a.code, a.body)
	}
	if a := <-send(client, url+"/v1/kv/meanwhile", bytes.NewReader([]byte("m")), 1); a.code != http.StatusNoContent {
		t.Fatalf("a body of the client while its slow body, declared as large as its share, arrives answered %d: %s", a.code, a.body)
	}
	select {
	case a := <-trickled:
		if a.code != http.StatusRequestTimeout && a.code != 0 {
			t.Fatalf("a body too slow to arrive within the time for a request answered %d, want 408 or a cut connection: %s", a.code, a.body)
		}
	case <-time.After(40 * time.Second):
		t.Fatalf("a body too slow to arrive within the time for a request was not cut off within 40s; it holds its client's share meanwhile")
	}
	if a := <-send(client, url+"/v1/kv/next", bytes.NewReader(bytes.Repeat([]byte("n"), size)), size); a.code != http.StatusNoContent {
		t.Fatalf("the client's next body, once its slow one was cut off, answered %d: %s", a.code, a.body)
	}
}

// declareAndTrickle opens a connection from ip and PUTs to path a body
// that declares length, asking to be told when to send it (Expect:
// 100-continue); once the API asks for it, it sends sent bytes of it and
// nothing more, until the test ends. It returns the connection, to send
// the rest on.
func declareAndTrickle(t *testing.T, url, ip, path string, length, sent int) net.Conn {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 20 * time.Second}
	conn, err := d.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintf(conn, "PUT %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", path, length); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("a PUT declaring %d bytes from %s was not asked for its body within 30s: %v", length, ip, err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusContinue {
		t.Fatalf("a PUT declaring %d bytes from %s answered %d, want 100 Continue", length, ip, resp.StatusCode)
	}
	if _, err := conn.Write(bytes.Repeat([]byte("t"), sent)); err != nil {
		t.Fatal(err)
	}
	return conn
}

// Clients that declare bodies of the most and then send next to nothing
// hold only what they have sent of the API's budget of bodies, so a small
// body of another client is read and stored meanwhile. A body used to
// reserve its whole declared length before a byte of it was read: four
// addresses, each with two such bodies of 8 MiB, held the whole 64 MiB
// while sending nothing, and every other client's body was refused 503
// until they were cut off.
func TestBodiesDeclaredLargeButSentSlowlyDoNotKeepASmallBodyOut(t *testing.T) {
	_, services := kernel(t, nil)
	url := serveReal(t, services, httpapi.Options{})
	perClient := httpapi.DefaultBodyBudget / httpapi.DefaultBodyShareDivisor / httpapi.DefaultMaxBody
	for c := range httpapi.DefaultBodyShareDivisor {
		for i := range perClient {
			declareAndTrickle(t, url, fmt.Sprintf("127.0.4.%d", c+1), fmt.Sprintf("/v1/kv/large-%d-%d", c, i), httpapi.DefaultMaxBody, 1<<10)
		}
	}
	honest := clientFrom("127.0.4.100")
	if a := <-send(honest, url+"/v1/kv/small", bytes.NewReader([]byte("small")), 5); a.code != http.StatusNoContent {
		t.Fatalf("a body of 5 bytes, while %d clients each had %d bodies of %d bytes declared and 1 KiB of each sent, answered %d: %s",
			httpapi.DefaultBodyShareDivisor, perClient, httpapi.DefaultMaxBody, a.code, a.body)
	}
}

// A body refused part-way, here as it grows past its client's share, is
// read no further: its 503 closes the connection, and the server reads
// none of the rest. The server used to read up to 256 KiB of what was
// left, at the client's pace and for as long as the stall time allowed,
// before it sent the answer, only to keep the connection; an answer that
// closed the connection was still followed by as much reading, as the
// server closes the body.
func TestABodyRefusedPartWayIsReadNoFurther(t *testing.T) {
	const (
		chunk  = 64 << 10
		length = 2 * chunk
	)
	_, services := kernel(t, nil)
	e := &engine{}
	e.ready.Store(true)
	ln, err := httpapi.Bind("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	counted := &countingListener{Listener: ln}
	s := httpapi.Serve(counted, httpapi.Options{
		Engine: e, Services: services, Logger: slog.New(slog.DiscardHandler),
		MaxBody: length, BodyBudget: 8 << 20, BodyShare: length,
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	url := "http://" + s.Addr()

	// A body of a chunk, declared and asked for, holds half the client's
	// share, so the client's next body is refused at its second chunk.
	declareAndTrickle(t, url, "127.0.5.1", "/v1/kv/held", chunk, 0)
	before := counted.read.Load()

	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.5.1")}, Timeout: 20 * time.Second}
	conn, err := d.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	request := append([]byte(fmt.Sprintf("PUT /v1/kv/refused HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n", length)),
		bytes.Repeat([]byte("r"), length)...)
	// The whole request is sent at once, as a client that does not wait
	// for 100 Continue sends it; the write fails once the connection is
	// closed under it.
	go func() { _, _ = conn.Write(request) }()
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("no answer to a body refused part-way: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "share") {
		t.Fatalf("a body past its client's share answered %d: %s", resp.StatusCode, b)
	}
	if !resp.Close {
		t.Fatalf("a body refused part-way was answered on a connection kept open, so the server read the rest of it first (Connection %q)", resp.Header.Get("Connection"))
	}
	// The server has closed the connection once the client reads its end.
	if _, err := r.ReadByte(); err == nil {
		t.Fatal("the connection of a body refused part-way carried more after its answer")
	}
	if read := counted.read.Load() - before; read >= int64(len(request)) {
		t.Fatalf("the server read %d bytes of a request of %d refused part-way, the whole of it", read, len(request))
	}
}

// countingListener counts the bytes its connections read.
type countingListener struct {
	net.Listener
	read atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, read: &l.read}, nil
}

type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}
