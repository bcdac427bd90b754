package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
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

// bodyChunk is the unit a body of more than one is read and reserved in:
// a body holds at most a chunk more than its client has sent.
const bodyChunk = 64 << 10

// chunks keeps the chunks of bodies already joined for the next bodies,
// which reserve them again as they take them. What it keeps unused the
// collector frees, as it frees garbage.
var chunks = sync.Pool{New: func() any { return new([bodyChunk]byte) }}

// readBody reads r's body whole, of at most maxBody bytes, under the
// budget. The body is reserved as it arrives: a body of a declared length
// of a chunk or less is read into a buffer of that length, reserved first;
// a longer one, or one of no declared length, is read into chunks, each
// reserved before a byte is read into it, so a body holds at most a chunk
// more than its client has sent, and the chunks are joined once whole
// (see join). A chunk that would pass the budget or the client's share is
// refused 503 (busy); a body of a declared length used to reserve it
// whole before a byte was read, and a client that declared 8 MiB and sent
// nothing held that much until it was cut off. Its reads are paced (see
// bodyReader), so a body that cannot arrive in time frees its reservation
// after the stall time. release gives the bytes back; the handler calls
// it once the call has answered, since the value is held until then. A
// read that fails or panics gives back what it took itself, and its
// answer closes the connection, so that the rest of the body is not read.
func (a *api) readBody(w http.ResponseWriter, r *http.Request) (data []byte, release func(), err error) {
	client := a.clients.of(r)
	body := a.bodyReader(w, r)
	var held int64
	// Room for the chunks of a body of 512 KiB, without an allocation.
	read := make([]*[bodyChunk]byte, 0, 8)
	giveBack := func() { a.bodies.Give(client, held) }
	defer func() {
		// Only a body read whole has a release; one that failed, or
		// whose reading panicked (the server recovers a handler's panic
		// and serves on), gives its chunks and reservation back here, or
		// they would be held for good.
		if release == nil {
			// The body is read no further: its answer closes the
			// connection, and the connection's reads end now. The
			// server would otherwise read up to 256 KiB of what is
			// left, at the client's pace, before it answered (to keep
			// the connection open) and again once it had answered
			// (as it closes a body), whatever the answer said.
			w.Header().Set("Connection", "close")
			_ = body.rc.SetReadDeadline(time.Now())
			for _, c := range read {
				chunks.Put(c)
			}
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
	if declared && most <= bodyChunk {
		if err := a.bodies.Take(client, most); err != nil {
			return nil, nil, busy(err)
		}
		held = most
		data = make([]byte, most)
		if _, err := io.ReadFull(body, data); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, nil, bodyReadError(err)
		}
		return data, giveBack, nil
	}
	var sent int64
	for sent < most {
		if sent == held {
			if err := a.bodies.Take(client, bodyChunk); err != nil {
				return nil, nil, busy(err)
			}
			held += bodyChunk
			read = append(read, chunks.Get().(*[bodyChunk]byte))
		}
		off := sent % bodyChunk
		n, err := body.Read(read[len(read)-1][off:min(bodyChunk, off+most-sent)])
		sent += int64(n)
		if errors.Is(err, io.EOF) {
			if declared && sent < most {
				return nil, nil, bodyReadError(io.ErrUnexpectedEOF)
			}
			return a.join(client, read, sent, &held), giveBack, nil
		}
		if err != nil {
			return nil, nil, bodyReadError(err)
		}
	}
	if !declared {
		// Full at the most: the body must end here.
		var probe [1]byte
		n, err := io.ReadFull(body, probe[:])
		if n > 0 {
			return nil, nil, fmt.Errorf("%w: body over %d bytes", ports.ErrTooLarge, a.maxBody)
		}
		if !errors.Is(err, io.EOF) {
			return nil, nil, bodyReadError(err)
		}
	}
	return a.join(client, read, sent, &held), giveBack, nil
}

// join copies the first n bytes of a body's chunks into one slice of n,
// gives the chunks back to the pool and their reservation but for n, so
// the body holds n from then. The slice is made before the chunks can be
// given back, so bodies are joined one at a time: while one is joined,
// the API holds its reserved bytes and at most one more body of the most
// beyond them, where a buffer that grew by copying held the one it grew
// out of, unreserved, beside it. The copy is not reserved: that would let
// a client complete half as many bodies of the most at once as its share
// holds.
func (a *api) join(client string, read []*[bodyChunk]byte, n int64, held *int64) []byte {
	a.joining.Lock()
	defer a.joining.Unlock()
	data := make([]byte, n)
	for i, c := range read {
		copy(data[i*bodyChunk:], c[:])
		chunks.Put(c)
		read[i] = nil
	}
	a.bodies.Give(client, *held-n)
	*held = n
	return data
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
