// Package natsclient implements the ports by calling a serving engine over
// NATS: the facades that modules and client engines use. A call that finds
// no engine listening is sent again for a few seconds, which hides the
// moment of a handover.
package natsclient

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/internal/callerauth"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// Retry timing when nobody answers: the first wait, its ceiling, and the
// whole window, which never passes the call's own deadline.
const (
	RetryFirst  = 50 * time.Millisecond
	RetryMax    = 500 * time.Millisecond
	RetryWindow = 5 * time.Second
)

// DefaultTimeout bounds a call whose context has no deadline.
const DefaultTimeout = 10 * time.Second

// Client sends calls to the serving engine.
type Client struct {
	nc      *nats.Conn
	signer  *callerauth.Signer
	timeout time.Duration
	flush   time.Duration
}

// Option configures a Client.
type Option func(*Client)

// WithSigner signs every call, for engines that require caller tokens.
func WithSigner(s *callerauth.Signer) Option { return func(c *Client) { c.signer = s } }

// WithTimeout bounds calls whose context has no deadline.
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithUploadFlush sets how long an object upload waits on a slow reader
// before it sends the bytes it has; 0 or less means DefaultUploadFlush.
func WithUploadFlush(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.flush = d
		}
	}
}

// DefaultUploadFlush is how long an object upload waits on a slow reader
// before it sends the bytes it has as a chunk shorter than the chunk size.
// The engine closes a transfer after a minute without a call; an HTTP
// client keeping to the API's least rate after a fast start may take 30 s
// over each read, and would take longer than that to fill a chunk.
const DefaultUploadFlush = 15 * time.Second

// New returns a client on nc.
func New(nc *nats.Conn, opts ...Option) *Client {
	c := &Client{nc: nc, timeout: DefaultTimeout, flush: DefaultUploadFlush}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Conn is the client's connection.
func (c *Client) Conn() *nats.Conn { return c.nc }

// Call sends req as JSON to subject and decodes the answer into resp (nil
// to ignore it). An engine's error answer comes back as a *wire.RemoteError
// that matches the ports' sentinel errors. A request or an answer too
// large for one message travels in chunks (overflow.go).
func (c *Client) Call(ctx context.Context, subject string, req, resp any) error {
	data, err := wire.Marshal(req)
	if err != nil {
		return fmt.Errorf("%s: encode: %w", subject, err)
	}
	answer, err := c.exchange(ctx, subject, data)
	if err != nil {
		return err
	}
	if resp == nil {
		return nil
	}
	if err := wire.Unmarshal(answer, resp); err != nil {
		return fmt.Errorf("%s: decode the answer: %w", subject, err)
	}
	return nil
}

// Request sends data and returns the answer, or the engine's error. It
// only reads header, so calls may share one, but a header must not change
// until Request returns. It retries when nobody listens (or an engine refuses with 503, having done
// nothing), only on subjects a queue group serves, within the retry window
// and the call's deadline.
func (c *Client) Request(ctx context.Context, subject string, data []byte, header nats.Header) (*nats.Msg, error) {
	return c.request(ctx, subject, data, header, Retryable(subject))
}

// request is Request, resending only when retry is set.
func (c *Client) request(ctx context.Context, subject string, data []byte, header nats.Header, retry bool) (*nats.Msg, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	// header is only read, here and by nats.go, so a caller may share one
	// between calls; the caller's token, term and wait go into a copy.
	msg := &nats.Msg{Subject: subject, Data: data, Header: make(nats.Header, len(header)+3)}
	maps.Copy(msg.Header, header)
	term, termed := ports.FencingToken(ctx)
	if c.signer != nil {
		tok, err := c.signer.Token()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", subject, err)
		}
		msg.Header.Set(wire.AuthHeader, tok)
	}
	if termed {
		// A call made under a serving term, as a module's job makes
		// them, is refused by an engine serving under a newer one: sent
		// late (its engine paused, or its connection held it while cut
		// off), it would otherwise run there as a call of that term.
		msg.Header.Set(wire.TermHeader, strconv.FormatUint(term, 10))
	}
	deadline, _ := ctx.Deadline()
	var pace backoff
	for {
		// Each attempt tells the engine how long it is still waited for,
		// so that a store waiting on a lock gives up in time to say it
		// did nothing, rather than past the deadline, a timeout (504).
		msg.Header[wire.WaitHeader] = sentWaits.value(max(0, time.Until(deadline).Milliseconds()))
		reply, err := c.nc.RequestMsgWithContext(ctx, msg)
		if err == nil {
			err = wire.ErrorFromHeaders(reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader))
			if err == nil {
				return reply, nil
			}
		}
		// A request its connection refused while reconnecting, with no
		// reconnect buffer to keep it in, was never sent: unavailable, and
		// not sent again here, since a connection without that buffer is
		// one whose calls must not land after their caller's moment.
		away := errors.Is(err, nats.ErrReconnectBufExceeded)
		nobody := errors.Is(err, nats.ErrNoResponders) || errors.Is(err, wire.ErrUnavailable)
		if away || !retry || !nobody || !pace.again(ctx) {
			if errors.Is(err, nats.ErrNoResponders) || away {
				return nil, fmt.Errorf("%s: %w: %w", subject, wire.ErrUnavailable, err)
			}
			return nil, fmt.Errorf("%s: %w", subject, err)
		}
	}
}

// sentWaits keeps the Abi-Wait values sent lately, shared by every Client.
var sentWaits waitValues

// waitValues keeps a header value of Abi-Wait for each of a few numbers of
// milliseconds, the last sent that fell in its slot. Callers mostly wait
// the same timeout, so most attempts find their value already made and
// set the header without allocating, where formatting it anew took one
// allocation and the header's slice another. A value is only ever read,
// here and by nats.go as it encodes the header, so calls share it.
type waitValues [16]atomic.Pointer[waitValue]

type waitValue struct {
	ms    int64
	value [1]string
}

// value is the header value saying ms milliseconds, ms >= 0.
func (w *waitValues) value(ms int64) []string {
	slot := &w[ms%int64(len(w))]
	if v := slot.Load(); v != nil && v.ms == ms {
		return v.value[:]
	}
	v := &waitValue{ms: ms, value: [1]string{strconv.FormatInt(ms, 10)}}
	slot.Store(v)
	return v.value[:]
}

// backoff paces the resends of one call: RetryFirst, doubling up to
// RetryMax, within RetryWindow of the first refusal. The zero value is
// ready for use.
type backoff struct {
	giveUp time.Time
	wait   time.Duration
}

// again waits before the next attempt, and reports false, at once, when
// that would pass the window, or leave the attempt less than attemptRoom
// before the context's deadline.
func (b *backoff) again(ctx context.Context) bool {
	if b.giveUp.IsZero() {
		b.giveUp, b.wait = time.Now().Add(RetryWindow), RetryFirst
	}
	if time.Now().Add(b.wait).After(b.giveUp) || !sleep(ctx, b.wait, attemptRoom) {
		return false
	}
	b.wait = min(2*b.wait, RetryMax)
	return true
}

// attemptRoom is the least time an attempt after a wait is begun with. A
// call every attempt of which found no engine is unavailable (503): one
// last attempt cut off by the deadline would make it a timeout (504),
// though it most likely found none either.
const attemptRoom = RetryFirst

// sleep waits d unless ctx ends first, or would leave less than room
// after it, which it reports as false.
func sleep(ctx context.Context, d, room time.Duration) bool {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d+room {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Retryable reports whether a subject is served on a queue group, where
// "nobody answered" means no engine serves at this moment, so sending again
// is safe and may reach the next one: one-shot kernel calls
// (abi.svc.<service>.v1.<op>), transfer opens
// (abi.svc.<service>.v1.transfer.open), overflow upload opens
// (abi.rpc.overflow.open) and discovery (abi.discovery.<project>.v1.<op>,
// but not presence). A session's owner subject belongs to one engine
// instance: nobody there means it is gone.
func Retryable(subject string) bool {
	if subject == wire.OverflowOpenSubject {
		return true
	}
	// The tokens go into an array on the stack: this runs on every call.
	var tokens [6]string
	n := 0
	for tok := range strings.SplitSeq(subject, ".") {
		if n == len(tokens) {
			return false
		}
		tokens[n] = tok
		n++
	}
	t := tokens[:n]
	switch {
	case len(t) == 5 && t[0] == "abi" && t[1] == "svc" && t[3] == "v1":
		return true
	case len(t) == 6 && t[0] == "abi" && t[1] == "svc" && t[3] == "v1" && t[4] == "transfer" && t[5] == "open":
		return true
	case len(t) == 5 && t[0] == "abi" && t[1] == "discovery" && t[3] == "v1" && t[4] != "presence":
		return true
	}
	return false
}

// text refuses a string JSON would alter on the way: invalid UTF-8 would
// reach the engine as U+FFFD, another key than the caller's.
func text(field, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s %q is not valid UTF-8", ports.ErrInvalidArgument, field, s)
	}
	return nil
}
