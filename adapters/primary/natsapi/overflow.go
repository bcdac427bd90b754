package natsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/internal/quota"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// Overflow limits by default.
const (
	DefaultOverflowIdle      = 60 * time.Second
	DefaultMaxOverflowOpen   = 64
	DefaultMaxOverflowValue  = 256 << 20
	DefaultMaxOverflowParked = 1 << 30
	DefaultOverflowChunkSize = 1 << 20
	DefaultUploadIdle        = 5 * time.Second
	// replyHeadroom is kept free of a reply's body in a message, for the
	// headers that may travel with it.
	replyHeadroom = 4 << 10
)

// OverflowOptions configure an OverflowHost.
type OverflowOptions struct {
	// Owner is the engine's instance id, the same as the Host's.
	Owner string
	// Conn is the engine's session connection, the Host's Replies.
	Conn *nats.Conn
	// CallerSecret, when set, binds sessions to the signed caller.
	CallerSecret []byte
	// Idle closes a session with no call for this long; 0 means 60 s. A
	// parked reply is first read within UploadIdle, and fetched within
	// Idle and UploadIdle a chunk.
	Idle time.Duration
	// MaxOpen bounds the sessions; 0 means 64.
	MaxOpen int
	// MaxValue bounds one reply or request; 0 means 256 MiB.
	MaxValue int64
	// MaxParked bounds the bytes all sessions hold; 0 means 1 GiB.
	MaxParked int64
	// MaxOpenPerCaller bounds the sessions of one caller (see Call.Who);
	// 0 means a quarter of MaxOpen.
	MaxOpenPerCaller int
	// MaxParkedPerCaller bounds the bytes one caller's sessions and calls
	// hold; 0 means a quarter of MaxParked, and never less than MaxValue.
	MaxParkedPerCaller int64
	// UploadIdle closes an upload that receives no write for this long,
	// or that, after its first UploadIdle, falls behind a chunk every
	// UploadIdle, which frees the bytes it reserved, and a parked reply
	// not read within it of being parked; 0 means 5 s.
	UploadIdle time.Duration
	// ChunkSize is the most data one message carries; 0 means 1 MiB, or
	// half the connection's max payload when that is less.
	ChunkSize int
	Logger    *slog.Logger
	// MayServe is asked before every session call; false answers 503.
	// nil: always.
	MayServe func() bool
}

// OverflowHost parks replies too large for one message until their caller
// has fetched them in chunks, and holds uploaded requests too large to
// send in one, on abi.rpc.overflow.<owner>.<operation>. A Host given one
// in its Options parks the large replies of calls that carry
// Abi-Overflow: 1 and serves the upload opens on abi.rpc.overflow.open.
type OverflowHost struct {
	t          *sessionTable
	chunk      int
	maxValue   int64
	uploadIdle time.Duration
	parked     *quota.Quota // by Call.Who
}

var _ SessionHost = (*OverflowHost)(nil)

// NewOverflowHost checks the options and returns a host that does not
// serve yet.
func NewOverflowHost(opts OverflowOptions) (*OverflowHost, error) {
	if opts.Owner == "" || opts.Conn == nil {
		return nil, errors.New("natsapi: an overflow host needs an Owner and a Conn")
	}
	if opts.Idle < 0 || opts.MaxOpen < 0 || opts.MaxValue < 0 || opts.MaxParked < 0 || opts.ChunkSize < 0 ||
		opts.MaxOpenPerCaller < 0 || opts.MaxParkedPerCaller < 0 || opts.UploadIdle < 0 {
		return nil, fmt.Errorf("natsapi: overflow limits %+v: none may be negative", opts)
	}
	if opts.Idle == 0 {
		opts.Idle = DefaultOverflowIdle
	}
	if opts.MaxOpen == 0 {
		opts.MaxOpen = DefaultMaxOverflowOpen
	}
	if opts.MaxValue == 0 {
		opts.MaxValue = DefaultMaxOverflowValue
	}
	if opts.MaxParked == 0 {
		opts.MaxParked = DefaultMaxOverflowParked
	}
	if opts.MaxOpenPerCaller == 0 {
		opts.MaxOpenPerCaller = max(1, opts.MaxOpen/4)
	}
	if opts.MaxParkedPerCaller == 0 {
		opts.MaxParkedPerCaller = min(opts.MaxParked, max(opts.MaxValue, opts.MaxParked/4))
	}
	if opts.UploadIdle == 0 {
		opts.UploadIdle = DefaultUploadIdle
	}
	most := int(opts.Conn.MaxPayload() / 2)
	switch {
	case opts.ChunkSize == 0:
		opts.ChunkSize = min(DefaultOverflowChunkSize, most)
	case opts.ChunkSize > most:
		return nil, fmt.Errorf("natsapi: overflow chunks of %d bytes pass half the connection's max payload (%d)", opts.ChunkSize, most)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	h := &OverflowHost{
		t: newSessionTable("overflow session", wire.OverflowPrefix, opts.Owner, opts.Conn, opts.CallerSecret,
			opts.Idle, opts.MaxOpen, opts.MaxOpenPerCaller, opts.Logger),
		chunk:      opts.ChunkSize,
		maxValue:   opts.MaxValue,
		parked:     quota.New(opts.MaxParked, opts.MaxParkedPerCaller),
		uploadIdle: opts.UploadIdle,
	}
	if may := opts.MayServe; may != nil {
		h.t.admit = func() (uint64, bool) { return 0, may() }
	}
	h.t.ops[wire.SessionWrite] = h.write
	h.t.ops[wire.SessionRead] = h.read
	return h, nil
}

// Serve subscribes the owner subject. After Stop it serves again.
func (h *OverflowHost) Serve() error { return h.t.serve() }

// Open is how many sessions are open.
func (h *OverflowHost) Open() int { return h.t.count() }

// StopAccepting does nothing: upload opens come through the Host, and a
// call the Host still answers may park its reply here.
func (h *OverflowHost) StopAccepting(context.Context) error { return nil }

// Wait returns once no session is open, or ctx ends.
func (h *OverflowHost) Wait(ctx context.Context) error { return h.t.wait(ctx) }

// Stop closes every session; their later calls find nobody.
func (h *OverflowHost) Stop() { h.t.stop() }

// Fence closes every session at once and ends the owner subscription, waiting
// on nothing; confirm waits, bounded, for the broker.
func (h *OverflowHost) Fence() (confirm func()) { return h.t.fence() }

// held is a parked reply, or a request being uploaded (upload true), with
// the bytes it has reserved of the parked budget, counted against who.
type held struct {
	h        *OverflowHost
	who      string
	data     []byte
	reserved int64
	upload   bool
	next     int64     // the next write's sequence number
	opened   time.Time // the pace an upload keeps and the time a reply is fetched in count from it
}

func (p *held) release() {
	p.h.unreserve(p.who, p.reserved)
	p.reserved = 0
	p.data = nil
}

// reserve takes n bytes of the parked budget, and of who's share of it.
func (h *OverflowHost) reserve(who string, n int64) error {
	if n > h.maxValue {
		return fmt.Errorf("%w: %d bytes, more than the %d an overflow session holds", ports.ErrTooLarge, n, h.maxValue)
	}
	err := h.parked.Take(who, n)
	var over *quota.Over
	switch {
	case !errors.As(err, &over):
		return err
	case over.Share:
		return fmt.Errorf("%w: %d more bytes would pass the %d one caller holds (%s holds %d)",
			wire.ErrUnavailable, n, over.Bound, who, over.Held)
	default:
		return fmt.Errorf("%w: %d more bytes would pass the %d this engine parks", wire.ErrUnavailable, n, over.Bound)
	}
}

func (h *OverflowHost) unreserve(who string, n int64) { h.parked.Give(who, n) }

// Parked is how many bytes sessions and running calls hold.
func (h *OverflowHost) Parked() int64 { return h.parked.Held() }

// start opens a session holding p, its bytes reserved, for caller (who
// may use it) and p.who (whose share it takes); it closes after idle
// without a call.
func (h *OverflowHost) start(caller string, p *held, idle time.Duration) (*session, error) {
	if err := h.reserve(p.who, p.reserved); err != nil {
		return nil, err
	}
	// It holds bytes and calls no store: it runs under no term.
	s, err := h.t.add(0, caller, p.who, idle)
	if err != nil {
		h.unreserve(p.who, p.reserved)
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed { // the engine stopped, or its idle time ran out, between add and here
		h.unreserve(p.who, p.reserved)
		if h.t.isStopped() {
			return nil, fmt.Errorf("%w: this engine takes no new %ss", wire.ErrUnavailable, h.t.kind)
		}
		return s, fmt.Errorf("%w: %w", wire.ErrUnavailable, errExpiredAtOnce)
	}
	s.state = p
	return s, nil
}

// errExpiredAtOnce is start's error, with the closed session, for a
// session whose idle time ran out before start handed it out: an idle time
// shorter than the moments between, as a test sets it, or a process that
// stalled there.
var errExpiredAtOnce = errors.New("the session's idle time ran out before it was handed out")

// park keeps a reply until its caller fetches it. The call has run, so a
// refusal is not 503 (which would have the caller send it again) but 413
// for a limit, and 500, interrupted, when the engine stopped serving.
//
// Its first read must come within UploadIdle, as an upload's first write
// must: a caller that still waits reads it as the answer naming it
// arrives, and only that answer names it, so a reply not asked for by
// then is one its caller gave up on (its deadline passed while the call
// ran) and nobody will fetch. Kept for the idle time, it held its
// caller's share of parked bytes, and the engine's budget, for nobody.
// The first read gives it the idle time (read).
func (h *OverflowHost) park(call *Call, data []byte) (*session, error) {
	s, err := h.start(call.Caller, &held{h: h, who: call.Who(), data: data, reserved: int64(len(data)), opened: time.Now()}, h.uploadIdle)
	if errors.Is(err, errExpiredAtOnce) {
		// Handed out closed, as if its first read had not come within the
		// idle time: the caller's fetch finds it gone and reads the call
		// as interrupted, as for any reply not read in time.
		return s, nil
	}
	if err != nil && h.t.isStopped() {
		// Not a limit: the engine stopped serving (a fence, a drain's
		// end) as the call ended, which is a call it stopped while it ran.
		return nil, fmt.Errorf("%w: the engine stopped serving before the reply of %d bytes was parked: %v", wire.ErrInterrupted, len(data), err)
	}
	if err != nil && !errors.Is(err, ports.ErrTooLarge) {
		return nil, fmt.Errorf("%w: a reply of %d bytes cannot be parked: %v", ports.ErrTooLarge, len(data), err)
	}
	return s, err
}

// service is the upload open, served by the Host on a queue group.
func (h *OverflowHost) service() Service {
	return Service{
		Name:        "overflow",
		Description: "abi-engine uploads of requests too large for one message",
		Prefix:      wire.OverflowPrefix,
		Endpoints: []Endpoint{{
			Name: "open",
			Handler: func(_ context.Context, call *Call) ([]byte, error) {
				var req wire.OverflowUpload
				if err := Decode(call.Data, &req); err != nil {
					return nil, err
				}
				if req.Size < 0 {
					return nil, fmt.Errorf("%w: field \"size\": %d, want 0 or more", ports.ErrInvalidArgument, req.Size)
				}
				s, err := h.start(call.Caller, &held{h: h, who: call.Who(), reserved: req.Size, upload: true, opened: time.Now()}, h.uploadIdle)
				if err != nil {
					return nil, err
				}
				return json.Marshal(wire.SessionOpened{ID: s.id, Secret: s.secret, ChunkSize: h.chunk})
			},
		}},
	}
}

func (h *OverflowHost) write(s *session, call *sessionCall) (nats.Header, []byte, error) {
	seq, err := call.seq()
	if err != nil {
		return nil, nil, err
	}
	p := s.state.(*held)
	switch {
	case !p.upload:
		return nil, nil, fmt.Errorf("%w: overflow session %q is a reply: it takes no write", ports.ErrInvalidArgument, s.id)
	case seq < p.next:
		return ack(seq) // sent again: already held
	case seq > p.next:
		return nil, nil, fmt.Errorf("%w: overflow session %q: write seq %d, want %d", ports.ErrConflict, s.id, seq, p.next)
	case len(call.Data) > h.chunk:
		return nil, nil, fmt.Errorf("%w: overflow session %q: a chunk of %d bytes, the most is %d", ports.ErrTooLarge, s.id, len(call.Data), h.chunk)
	case int64(len(p.data)+len(call.Data)) > p.reserved:
		return nil, nil, fmt.Errorf("%w: overflow session %q: more than the %d bytes announced", ports.ErrTooLarge, s.id, p.reserved)
	case h.behind(p, len(call.Data)):
		// A write now and then would otherwise hold the whole reservation
		// for as long as its caller likes: the bytes are freed.
		err := fmt.Errorf("%w: overflow session %q: %d of %d bytes in %v, slower than a chunk of %d bytes every %v; closed",
			ports.ErrInvalidArgument, s.id, len(p.data), p.reserved, time.Since(p.opened).Round(time.Millisecond), h.chunk, h.uploadIdle)
		h.t.closeLocked(s)
		return nil, nil, err
	}
	if p.data == nil {
		// The whole body, once: grown a chunk at a time, its buffers came
		// to some five times its size, the last up to a quarter more than
		// the bytes reserved for it.
		p.data = make([]byte, 0, p.reserved)
	}
	p.data = append(p.data, call.Data...)
	p.next++
	return ack(seq)
}

// behind reports whether an upload, with n more bytes, has fallen behind
// the least rate an upload keeps: after a first UploadIdle of grace, a
// chunk (or what is left of the body) every UploadIdle.
func (h *OverflowHost) behind(p *held, n int) bool {
	late := time.Since(p.opened) - h.uploadIdle
	if late <= 0 {
		return false
	}
	owed := min(p.reserved, int64(float64(h.chunk)*late.Seconds()/h.uploadIdle.Seconds()))
	return int64(len(p.data)+n) < owed
}

// read answers chunk seq of a parked reply. Chunks are fixed slices of the
// reply, so any may be read again, in any order, but only within the idle
// time and UploadIdle a chunk of the reply being parked.
func (h *OverflowHost) read(s *session, call *sessionCall) (nats.Header, []byte, error) {
	seq, err := call.seq()
	if err != nil {
		return nil, nil, err
	}
	p := s.state.(*held)
	if p.upload {
		return nil, nil, fmt.Errorf("%w: overflow session %q is an upload: it takes no read", ports.ErrInvalidArgument, s.id)
	}
	size := int64(len(p.data))
	chunks := max(1, (size+int64(h.chunk)-1)/int64(h.chunk))
	if seq >= chunks {
		return nil, nil, fmt.Errorf("%w: overflow session %q: read seq %d of %d chunks", ports.ErrInvalidArgument, s.id, seq, chunks)
	}
	if most := h.t.idle + time.Duration(chunks)*h.uploadIdle; time.Since(p.opened) > most {
		// Reads now and then would otherwise hold the reply's bytes for as
		// long as its caller likes: it has its idle time and a chunk's
		// upload idle time for each chunk to fetch it in.
		h.t.closeLocked(s)
		return nil, nil, fmt.Errorf("%w: overflow session %q: a reply of %d chunks is fetched within %v; closed", ports.ErrNotFound, s.id, chunks, most)
	}
	// Asked for, the reply has the idle time between reads (park).
	s.idle = h.t.idle
	start := seq * int64(h.chunk)
	end := min(start+int64(h.chunk), size)
	return chunkHeader(seq, seq == chunks-1), p.data[start:end], nil
}

// take hands over an uploaded request body and closes its session. The
// bytes stay reserved until the call that takes them ends, when it calls
// release: a body decoded and worked on is in memory as much as a parked
// one.
func (h *OverflowHost) take(id, secret, caller string) (data []byte, release func(), err error) {
	if owner := wire.OwnerOf(id); owner != h.t.owner {
		return nil, nil, fmt.Errorf("%w: the uploaded request %q is held by engine %q", wire.ErrUnavailable, id, owner)
	}
	var who string
	var n int64
	data, err = h.t.use(wire.SessionRef{ID: id, Secret: secret}, caller, func(s *session) ([]byte, error) {
		p := s.state.(*held)
		if !p.upload {
			return nil, fmt.Errorf("%w: overflow session %q is a reply, not a request", ports.ErrInvalidArgument, id)
		}
		if int64(len(p.data)) != p.reserved {
			return nil, fmt.Errorf("%w: overflow request %q: %d of %d bytes uploaded", ports.ErrInvalidArgument, id, len(p.data), p.reserved)
		}
		data, who, n = p.data, p.who, p.reserved
		p.reserved = 0 // handed over to the call with the data
		h.t.closeLocked(s)
		return data, nil
	})
	if errors.Is(err, ports.ErrNotFound) && h.t.closedByFence(wire.SessionRef{ID: id, Secret: secret}, caller) {
		// The engine closed it when it stopped serving: the call did
		// nothing, and is uploaded again and sent anew.
		return nil, nil, fmt.Errorf("%w: the uploaded request %q was closed when the engine stopped serving", wire.ErrUnavailable, id)
	}
	if errors.Is(err, ports.ErrNotFound) {
		return nil, nil, fmt.Errorf("%w: header %s: no uploaded request %q (expired?)", ports.ErrInvalidArgument, wire.OverflowRequestHeader, id)
	}
	if err != nil {
		return nil, nil, err
	}
	return data, func() { h.unreserve(who, n) }, nil
}

// uploaded gives a call that names an uploaded request, and carries no
// body of its own, the upload as its body; release, nil without one, frees
// its bytes once the call has ended.
func (h *Host) uploaded(call *Call) (release func(), err error) {
	id := call.Header.Get(wire.OverflowRequestHeader)
	if id == "" {
		return nil, nil
	}
	if h.opts.Overflow == nil {
		return nil, fmt.Errorf("%w: header %s: this engine takes no uploaded requests", ports.ErrInvalidArgument, wire.OverflowRequestHeader)
	}
	// The upload is the call's body: a body sent as well would be dropped
	// without a word. Refused before the upload is taken, the call does
	// nothing and the upload stays for a call that names it alone.
	if len(call.Data) > 0 {
		return nil, fmt.Errorf("%w: header %s names an uploaded request, and the call carries a body of %d bytes as well: send an empty body",
			ports.ErrInvalidArgument, wire.OverflowRequestHeader, len(call.Data))
	}
	data, release, err := h.opts.Overflow.take(id, call.Header.Get(wire.OverflowSecretHeader), call.Caller)
	if err != nil {
		return nil, err
	}
	call.Data = data
	return release, nil
}

// parkIfLarge parks a reply too large for one message when the call can
// take it, and answers with the headers that name it instead.
func (h *Host) parkIfLarge(call *Call, data []byte) (nats.Header, []byte, error) {
	most := h.messageMost()
	if len(data) <= most {
		return nil, data, nil
	}
	if call.Header.Get(wire.OverflowHeader) != "1" || h.opts.Overflow == nil {
		return nil, nil, fmt.Errorf("%w: the reply of %d bytes passes the %d one message holds; send %s: 1 to fetch it in chunks",
			ports.ErrTooLarge, len(data), most, wire.OverflowHeader)
	}
	s, err := h.opts.Overflow.park(call, data)
	if err != nil {
		return nil, nil, err
	}
	return nats.Header{
		wire.OverflowReplyHeader:  {s.id},
		wire.OverflowSecretHeader: {s.secret},
		wire.OverflowSizeHeader:   {strconv.Itoa(len(data))},
	}, nil, nil
}
