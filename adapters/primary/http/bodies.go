package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/abi-engine/engine/internal/quota"
	"github.com/abi-engine/engine/ports"
)

// Bounds of the request bodies the API reads whole (key-value values and
// JSON requests), across every request in flight. Each body is at most
// MaxBody; without these, every connection could hold that much at once,
// and a few thousand slow or concurrent clients held gigabytes of the
// process the engine's NATS callers share.
const (
	// DefaultBodyBudget is how many bytes of such bodies the API holds at
	// once; a request whose body would pass it is answered 503 with a
	// Retry-After before its body is read.
	DefaultBodyBudget = 64 << 20
	// DefaultBodyShareDivisor gives one client's share of the budget: a
	// quarter, as a NATS caller's share of the engine's overflow bytes.
	DefaultBodyShareDivisor = 4
	// DefaultBodyStall is how long one read of such a body may wait on
	// the client; once the reads have waited that long in all, the client
	// must have kept up the minimum rate of a transfer. A body holds its
	// reservation while it arrives, so a client that declared a length and
	// then sent nothing held it for the whole time a request may take.
	DefaultBodyStall = 10 * time.Second
)

// errBusy is a request the API refuses for now, since the bodies in
// flight hold its budget or the client's share of it: 503, Retry-After.
var errBusy = errors.New("the API is busy")

// busy is a take of the body budget refused: 503, with what it would
// have passed.
func busy(err error) error {
	var over *quota.Over
	if !errors.As(err, &over) {
		return err
	}
	if over.Share {
		return fmt.Errorf("%w: the bodies of this client's requests in flight hold %d bytes, and %d more would pass its share of %d; try again later",
			errBusy, over.Held, over.Asked, over.Bound)
	}
	return fmt.Errorf("%w: the bodies of requests in flight hold %d bytes, and %d more would pass the API's %d; try again later",
		errBusy, over.Held, over.Asked, over.Bound)
}

// readBody reads r's body whole, of at most maxBody bytes, under the
// budget: a body of a declared length is read into a buffer of that
// length, reserved before a byte is read, and one of no declared length
// (chunked) reserves each buffer it grows into. Its reads are paced (see
// bodyReader), so a body that cannot arrive in time frees its reservation
// after the stall time. release gives the bytes back; the handler calls it once
// the call has answered, since the value is held until then.
func (a *api) readBody(w http.ResponseWriter, r *http.Request) (data []byte, release func(), err error) {
	client := a.clients.of(r)
	body := a.bodyReader(w, r)
	var held int64
	giveBack := func() { a.bodies.Give(client, held) }
	defer func() {
		if err != nil {
			giveBack()
			return
		}
		// The body is read: the connection is back under the time for a
		// request, as the server set it, while the call runs.
		_ = body.rc.SetReadDeadline(body.until)
	}()
	switch n := r.ContentLength; {
	case n == 0:
		return []byte{}, func() {}, nil
	case n > a.maxBody:
		return nil, nil, fmt.Errorf("%w: body of %d bytes, over %d bytes", ports.ErrTooLarge, n, a.maxBody)
	case n > 0:
		// A body that cannot arrive whole within the time for a request
		// is cut off once the reads have waited the stall time, not at
		// the end of that time: at the minimum rate alone, a client that
		// declared 8 MiB and sent 8 KiB/s held its reservation for the
		// whole minute, and would never have finished.
		body.rate = max(body.rate, float64(n)/requestTimeout.Seconds())
		if err := a.bodies.Take(client, n); err != nil {
			return nil, nil, busy(err)
		}
		held = n
		data = make([]byte, n)
		if _, err := io.ReadFull(body, data); err != nil {
			return nil, nil, bodyReadError(err)
		}
		return data, giveBack, nil
	}
	for {
		if len(data) == cap(data) {
			if int64(len(data)) == a.maxBody {
				// Full at the most: the body must end here.
				var probe [1]byte
				n, err := io.ReadFull(body, probe[:])
				if n > 0 {
					return nil, nil, fmt.Errorf("%w: body over %d bytes", ports.ErrTooLarge, a.maxBody)
				}
				if !errors.Is(err, io.EOF) {
					return nil, nil, bodyReadError(err)
				}
				return data, giveBack, nil
			}
			// The buffer it grows out of is garbage once copied: only the
			// bytes it grows by are reserved.
			grown := min(max(2*int64(cap(data)), 4<<10), a.maxBody)
			if err := a.bodies.Take(client, grown-int64(cap(data))); err != nil {
				return nil, nil, busy(err)
			}
			held = grown
			next := make([]byte, len(data), grown)
			copy(next, data)
			data = next
		}
		n, err := body.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if errors.Is(err, io.EOF) {
			return data, giveBack, nil
		}
		if err != nil {
			return nil, nil, bodyReadError(err)
		}
	}
}

// bodyReader reads r's body for readBody: each read waits at most the
// body stall time on the client, and never past the server's time for a
// request from now, and once the reads have waited the stall time in all
// the client must have kept up the minimum rate, or for a body of a
// declared length the rate that brings it whole within the time for a
// request, if that is higher (readBody sets it).
func (a *api) bodyReader(w http.ResponseWriter, r *http.Request) *pacedReader {
	return &pacedReader{
		r: r.Body, rc: http.NewResponseController(w), until: time.Now().Add(requestTimeout),
		pace: pace{what: "sent", stall: a.bodyStall, rate: a.minRate},
	}
}

// bodyReadError is a body the client did not send whole: 408 when it
// stalled, fell below the minimum rate or took longer than the server's
// time for a request, else 400.
func bodyReadError(err error) error {
	if errors.Is(err, errTooSlow) {
		return err
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w: the body stopped arriving, or did not arrive within the time for a request: %v", errTooSlow, err)
	}
	return fmt.Errorf("%w: body: %v", ports.ErrInvalidArgument, err)
}
