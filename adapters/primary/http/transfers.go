package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Bounds of object transfers over HTTP. An object may be as large as it
// likes, so no total time bounds its transfer; instead a client must keep
// up a minimum rate, and a transfer it stalls is cut off. Other requests
// are bounded whole by the server's timeouts (see Listen).
const (
	// DefaultMaxTransfers is how many object GETs and PUTs run at once; one
	// more is answered 503 at once. It is one NATS caller's share of the
	// engine's transfers, which the API's own client is, so HTTP clients
	// never take the transfers of NATS callers.
	DefaultMaxTransfers = 8
	// DefaultTransferShareDivisor gives one client's share of the
	// transfers: a quarter, as a NATS caller's share of the engine's. A
	// share is at least one transfer.
	DefaultTransferShareDivisor = 4
	// DefaultTransferStall is how long one read of an upload or one write
	// of a download may wait on the client.
	DefaultTransferStall = 30 * time.Second
	// DefaultMinTransferRate is the average rate, in bytes per second, a
	// client must keep up over the time the transfer waits on it, once
	// that time passes DefaultTransferStall.
	DefaultMinTransferRate = 8 << 10
)

// errTooSlow is a transfer whose client sends or takes bytes slower than
// the API allows: 408.
var errTooSlow = errors.New("the client is too slow")

// transferSlots admits an object transfer, or answers 503 with a
// Retry-After when every slot is taken or the client (see clients) holds
// its share of them: a client that keeps its transfers going at the
// minimum rate would otherwise hold every slot for as long as it liked.
// A HEAD, which the GET route also serves, looks the object up and moves
// none of it: it takes no transfer slot, but is a request in flight like
// any other call of the services (requestSlots).
func (a *api) transferSlots(h http.HandlerFunc) http.HandlerFunc {
	head := a.requestSlots(answeredWhole(h))
	transfer := a.slotted(a.transfers, h, func(share bool, held int64) string {
		if share {
			return fmt.Sprintf("this client runs %d object transfers, its share of the %d this API runs at once; try again later",
				held, a.maxTransfers)
		}
		return fmt.Sprintf("%d object transfers run, the most this API runs at once; try again later", a.maxTransfers)
	})
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			head(w, r)
			return
		}
		transfer(w, r)
	}
}

// pace measures the time a transfer waits on its client and the bytes it
// moves, and fails it when the client stalls or keeps below the rate.
type pace struct {
	what    string // "sent" or "took"
	stall   time.Duration
	rate    float64
	n       int64
	blocked time.Duration
}

func (p *pace) account(n int, took time.Duration) error {
	p.n += int64(n)
	p.blocked += took
	if p.blocked > p.stall && float64(p.n) < p.rate*p.blocked.Seconds() {
		return fmt.Errorf("%w: it %s %d bytes in %v, less than %.0f bytes/s", errTooSlow, p.what, p.n, p.blocked.Round(time.Millisecond), p.rate)
	}
	return nil
}

// pacedReader reads an upload's body: each read waits at most the stall
// time for the client, and the client keeps up the minimum rate.
type pacedReader struct {
	r  io.Reader
	rc *http.ResponseController
	// until, when set, is the latest a read may wait to.
	until time.Time
	pace
}

func (a *api) pacedBody(w http.ResponseWriter, r *http.Request) *pacedReader {
	return &pacedReader{r: r.Body, rc: http.NewResponseController(w), pace: pace{what: "sent", stall: a.stall, rate: a.minRate}}
}

func (p *pacedReader) Read(b []byte) (int, error) {
	start := time.Now()
	deadline := start.Add(p.stall)
	if !p.until.IsZero() && p.until.Before(deadline) {
		deadline = p.until
	}
	_ = p.rc.SetReadDeadline(deadline)
	n, err := p.r.Read(b)
	if perr := p.account(n, time.Since(start)); perr != nil && err == nil {
		err = perr
	}
	return n, err
}

// pacedWriter writes a download: each write waits at most the stall time
// for the client, and the client keeps up the minimum rate. Time spent
// waiting for the object's next bytes is not the client's and not counted.
type pacedWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
	pace
}

func (a *api) pacedResponse(w http.ResponseWriter) *pacedWriter {
	rc := http.NewResponseController(w)
	// A download reads nothing more from its client; the server's read
	// deadline, meant for requests, would cut it off when it passed.
	_ = rc.SetReadDeadline(time.Time{})
	return &pacedWriter{w: w, rc: rc, pace: pace{what: "took", stall: a.stall, rate: a.minRate}}
}

func (p *pacedWriter) Write(b []byte) (int, error) {
	_ = p.rc.SetWriteDeadline(time.Now().Add(p.stall))
	start := time.Now()
	n, err := p.w.Write(b)
	if perr := p.account(n, time.Since(start)); perr != nil && err == nil {
		err = perr
	}
	return n, err
}
