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
	// once; a request whose body would grow past it, as it arrives, is
	// answered 503 with a Retry-After.
	DefaultBodyBudget = 64 << 20
	// DefaultBodyShareDivisor gives one client's share of the budget: a
	// quarter, as a NATS caller's share of the engine's overflow bytes.
	DefaultBodyShareDivisor = 4
	// DefaultBodyStall is how long one read of such a body may wait on
	// the client; once the reads have waited that long in all, the client
	// must have kept up the minimum rate of a transfer. A body holds what
	// it has reserved while it arrives, so a client that sent part of a
	// body and then nothing held that for the whole time a request may
	// take.
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

// bodyStep is how far ahead of its bytes a body's reservation runs, but
// for a quarter of what it holds once that is more (see grownTo).
const bodyStep = 64 << 10

// readBody reads r's body whole, of at most maxBody bytes, under the
// budget. The body is reserved as it arrives: its buffer grows as it
// fills, and each growth is reserved before a byte is read into it, so a
// body holds at most bodyStep, or a quarter of what it holds, more than
// its client has sent. A body of a declared length starts with a buffer
// of bodyStep, or of that length if it is less, and grows to that length
// at most. A growth that would pass the budget or the client's share is
// refused 503 (busy), as a body's first buffer is; a body of a declared
// length used to reserve it whole before a byte was read, and a client
// that declared 8 MiB and sent nothing held that much until it was cut
// off. Its reads are paced (see bodyReader), so a body that cannot arrive
// in time frees its reservation after the stall time. release gives the
// bytes back; the handler calls it once the call has answered, since the
// value is held until then.
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
	most, declared := a.maxBody, r.ContentLength > 0
	switch n := r.ContentLength; {
	case n == 0:
		return []byte{}, func() {}, nil
	case n > a.maxBody:
		return nil, nil, fmt.Errorf("%w: body of %d bytes, over %d bytes", ports.ErrTooLarge, n, a.maxBody)
	case declared:
		// A body that cannot arrive whole within the time for a request
		// is cut off once the reads have waited the stall time, not at
		// the end of that time: at the minimum rate alone, a client that
		// declared 8 MiB and sent 8 KiB/s held its reservation for the
		// whole minute, and would never have finished.
		body.rate = max(body.rate, float64(n)/requestTimeout.Seconds())
		most = n
	}
	for {
		if len(data) == cap(data) {
			if int64(len(data)) == most {
				if declared {
					return data, giveBack, nil
				}
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
			grown := grownTo(int64(cap(data)), most)
			if declared && cap(data) == 0 {
				grown = min(most, bodyStep)
			}
			// The buffer it grows out of is garbage once copied: only the
			// bytes it grows by are reserved.
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
			if declared && int64(len(data)) < most {
				return nil, nil, bodyReadError(io.ErrUnexpectedEOF)
			}
			return data, giveBack, nil
		}
		if err != nil {
			return nil, nil, bodyReadError(err)
		}
	}
}

// grownTo is the capacity a body's buffer of capacity c grows to, at most
// most: it doubles from 4 KiB up to bodyStep, then grows by bodyStep or by
// a quarter, whichever is more. It grows only once full, so the body holds
// at most that step more than it has been sent. The price is the copies:
// an 8 MiB body grows some 20 times, allocating some 43 MiB in all, where
// a body read into a buffer of its declared length allocated it once.
func grownTo(c, most int64) int64 {
	return min(most, c+max(min(c, bodyStep), c/4, 4<<10))
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
