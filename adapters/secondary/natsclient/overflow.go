package natsclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// overflowOn is the value of the overflow header on every call, and
// overflowAccepted the header of a call whose request goes whole: nats.go
// and Request only read them, so one serves every call.
var (
	overflowOn       = []string{"1"}
	overflowAccepted = nats.Header{wire.OverflowHeader: overflowOn}
)

// fetchPrealloc bounds the room made for a parked answer before its bytes
// arrive.
const fetchPrealloc = 16 << 20

// closeTimeout bounds the close of a session.
const closeTimeout = 5 * time.Second

// requestHeadroom is kept free of a request's body in a message, for the
// caller's token and the other headers.
const requestHeadroom = 8 << 10

// exchange sends a call that may take an overflow reply, and returns its
// answer. A body too large for one message is uploaded first; a parked
// answer is fetched in chunks. An engine takes an upload as the call that
// names it arrives, so a call it then refuses (503: it did nothing, or it
// no longer serves, or the upload is another engine's) is not sent again
// as it was, naming an upload that is gone: it is uploaded again and sent
// anew, paced as Request paces its own resends.
func (c *Client) exchange(ctx context.Context, subject string, data []byte) ([]byte, error) {
	large := len(data) > int(c.nc.MaxPayload())-requestHeadroom
	// The resends' window opens at the first refusal: an upload, and a
	// wait in the engine's queue, may take longer than the window itself.
	var pace backoff
	for {
		header := overflowAccepted
		body := data
		var upload wire.SessionOpened
		if large {
			var err error
			if upload, err = c.upload(ctx, data); err != nil {
				return nil, fmt.Errorf("%s: upload the request: %w", subject, sessionLost(err, wire.ErrUnavailable))
			}
			header = nats.Header{
				wire.OverflowHeader:        overflowOn,
				wire.OverflowRequestHeader: {upload.ID},
				wire.OverflowSecretHeader:  {upload.Secret},
			}
			body = nil
		}
		retry := Retryable(subject)
		msg, err := c.request(ctx, subject, body, header, retry && !large)
		if err != nil {
			if large {
				// Whether an engine took it or not, the upload is done with.
				c.closeSession(wire.OverflowSubject(wire.OwnerOf(upload.ID), wire.SessionClose), upload.Ref())
				if retry && errors.Is(err, wire.ErrUnavailable) && pace.again(ctx) {
					continue
				}
			}
			return nil, err
		}
		id := msg.Header.Get(wire.OverflowReplyHeader)
		if id == "" {
			return msg.Data, nil
		}
		size, err := strconv.ParseInt(msg.Header.Get(wire.OverflowSizeHeader), 10, 64)
		if err != nil || size < 0 {
			return nil, fmt.Errorf("%s: parked answer %q: bad %s %q", subject, id, wire.OverflowSizeHeader, msg.Header.Get(wire.OverflowSizeHeader))
		}
		answer, err := c.fetch(ctx, wire.SessionRef{ID: id, Secret: msg.Header.Get(wire.OverflowSecretHeader)}, size)
		if err != nil {
			return nil, fmt.Errorf("%s: fetch the parked answer: %w", subject, sessionLost(err, wire.ErrInterrupted))
		}
		return answer, nil
	}
}

// sessionLost is err, from a session's write or read, as the call's caller
// must read it. The engine answers 404 for a session it closed (idle, too
// slow, or fenced) and 400 for a write it will not take; said of the call,
// either would blame its key or its argument. So they become as: for an
// upload ErrUnavailable, since no engine ran the call; for a parked
// answer ErrInterrupted, since the call ran and its answer is lost.
func sessionLost(err, as error) error {
	if errors.Is(err, ports.ErrNotFound) || errors.Is(err, ports.ErrInvalidArgument) {
		return fmt.Errorf("%w: the session closed: %v", as, err)
	}
	return err
}

// upload sends data to an overflow session, chunk by chunk.
func (c *Client) upload(ctx context.Context, data []byte) (wire.SessionOpened, error) {
	var opened wire.SessionOpened
	if err := c.call(ctx, wire.OverflowOpenSubject, wire.OverflowUpload{Size: int64(len(data))}, &opened); err != nil {
		return opened, err
	}
	if opened.ChunkSize <= 0 {
		return opened, fmt.Errorf("overflow session %q: chunk size %d", opened.ID, opened.ChunkSize)
	}
	owner := wire.OwnerOf(opened.ID)
	for seq := int64(0); len(data) > 0; seq++ {
		n := min(len(data), opened.ChunkSize)
		if _, err := c.inSession(ctx, wire.OverflowSubject(owner, wire.SessionWrite), opened.Ref(), seq, data[:n]); err != nil {
			c.closeSession(wire.OverflowSubject(owner, wire.SessionClose), opened.Ref())
			return opened, err
		}
		data = data[n:]
	}
	return opened, nil
}

// fetch reads a parked answer of size bytes and closes its session.
func (c *Client) fetch(ctx context.Context, ref wire.SessionRef, size int64) ([]byte, error) {
	owner := wire.OwnerOf(ref.ID)
	defer c.closeSession(wire.OverflowSubject(owner, wire.SessionClose), ref)
	var out bytes.Buffer
	// The size is the engine's word, not yet backed by bytes: room is made
	// for it up to a bound, and beyond that as the chunks come.
	out.Grow(int(min(size, fetchPrealloc)))
	for seq := int64(0); ; seq++ {
		data, done, err := c.readChunk(ctx, wire.OverflowSubject(owner, wire.SessionRead), ref, seq)
		if err != nil {
			return nil, err
		}
		out.Write(data)
		if int64(out.Len()) > size {
			return nil, fmt.Errorf("overflow session %q: more than the %d bytes announced", ref.ID, size)
		}
		if done {
			break
		}
	}
	if int64(out.Len()) != size {
		return nil, fmt.Errorf("overflow session %q: %d bytes, %d announced", ref.ID, out.Len(), size)
	}
	return out.Bytes(), nil
}

// call sends an open: JSON both ways, never in chunks.
func (c *Client) call(ctx context.Context, subject string, req, resp any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("%s: encode: %w", subject, err)
	}
	msg, err := c.Request(ctx, subject, data, nil)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(msg.Data, resp); err != nil {
		return fmt.Errorf("%s: decode the answer: %w", subject, err)
	}
	return nil
}

// inSession sends one message of a session: headers name the session and
// the chunk (seq < 0: none), the body is raw.
func (c *Client) inSession(ctx context.Context, subject string, ref wire.SessionRef, seq int64, body []byte) (*nats.Msg, error) {
	header := nats.Header{wire.SessionHeader: {ref.ID}, wire.SessionSecretHeader: {ref.Secret}}
	if seq >= 0 {
		header.Set(wire.SeqHeader, strconv.FormatInt(seq, 10))
	}
	return c.Request(ctx, subject, body, header)
}

// readChunk reads chunk seq of a session.
func (c *Client) readChunk(ctx context.Context, subject string, ref wire.SessionRef, seq int64) ([]byte, bool, error) {
	msg, err := c.inSession(ctx, subject, ref, seq, nil)
	if err != nil {
		return nil, false, err
	}
	if got := msg.Header.Get(wire.SeqHeader); got != strconv.FormatInt(seq, 10) {
		return nil, false, fmt.Errorf("%s: asked for chunk %d, got %q", subject, seq, got)
	}
	return msg.Data, msg.Header.Get(wire.DoneHeader) == "1", nil
}

// closeSession ends a session, on its own short deadline since the call's
// may have passed; a session already gone is fine.
func (c *Client) closeSession(subject string, ref wire.SessionRef) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_, _ = c.inSession(ctx, subject, ref, -1, nil)
}
