package natsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

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
	// Idle closes a session with no call for this long; 0 means 60 s.
	Idle time.Duration
	// MaxOpen bounds the sessions; 0 means 64.
	MaxOpen int
	// MaxValue bounds one reply or request; 0 means 256 MiB.
	MaxValue int64
	// MaxParked bounds the bytes all sessions hold; 0 means 1 GiB.
	MaxParked int64
	// ChunkSize is the most data one message carries; 0 means 1 MiB, or
	// half the connection's max payload when that is less.
	ChunkSize int
	Logger    *slog.Logger
}

// OverflowHost parks replies too large for one message until their caller
// has fetched them in chunks, and holds uploaded requests too large to
// send in one, on abi.rpc.overflow.<owner>.<operation>. A Host given one
// in its Options parks the large replies of calls that carry
// Abi-Overflow: 1 and serves the upload opens on abi.rpc.overflow.open.
type OverflowHost struct {
	t         *sessionTable
	chunk     int
	maxValue  int64
	maxParked int64

	mu     sync.Mutex
	parked int64
}

var _ SessionHost = (*OverflowHost)(nil)

// NewOverflowHost checks the options and returns a host that does not
// serve yet.
func NewOverflowHost(opts OverflowOptions) (*OverflowHost, error) {
	if opts.Owner == "" || opts.Conn == nil {
		return nil, errors.New("natsapi: an overflow host needs an Owner and a Conn")
	}
	if opts.Idle < 0 || opts.MaxOpen < 0 || opts.MaxValue < 0 || opts.MaxParked < 0 || opts.ChunkSize < 0 {
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
		t:         newSessionTable("overflow session", wire.OverflowPrefix, opts.Owner, opts.Conn, opts.CallerSecret, opts.Idle, opts.MaxOpen, opts.Logger),
		chunk:     opts.ChunkSize,
		maxValue:  opts.MaxValue,
		maxParked: opts.MaxParked,
	}
	h.t.ops[wire.SessionWrite] = h.write
	h.t.ops[wire.SessionRead] = h.read
	h.t.ops[wire.SessionClose] = h.t.closeOp
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

// held is a parked reply, or a request being uploaded (upload true), with
// the bytes it has reserved of the parked budget.
type held struct {
	h        *OverflowHost
	data     []byte
	reserved int64
	upload   bool
	next     int64 // the next write's sequence number
}

func (p *held) release() {
	p.h.mu.Lock()
	p.h.parked -= p.reserved
	p.h.mu.Unlock()
	p.data = nil
}

// reserve takes n bytes of the parked budget.
func (h *OverflowHost) reserve(n int64) error {
	if n > h.maxValue {
		return fmt.Errorf("%w: %d bytes, more than the %d an overflow session holds", ports.ErrTooLarge, n, h.maxValue)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.parked+n > h.maxParked {
		return fmt.Errorf("%w: %d more bytes would pass the %d this engine parks", wire.ErrUnavailable, n, h.maxParked)
	}
	h.parked += n
	return nil
}

func (h *OverflowHost) unreserve(n int64) {
	h.mu.Lock()
	h.parked -= n
	h.mu.Unlock()
}

// start opens a session holding p, its bytes reserved.
func (h *OverflowHost) start(caller string, p *held) (*session, error) {
	if err := h.reserve(p.reserved); err != nil {
		return nil, err
	}
	s, err := h.t.add(caller)
	if err != nil {
		h.unreserve(p.reserved)
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state = p
	return s, nil
}

// park keeps a reply until its caller fetches it. The call has run, so a
// refusal is not 503 (which would have the caller send it again) but 413.
func (h *OverflowHost) park(caller string, data []byte) (*session, error) {
	s, err := h.start(caller, &held{h: h, data: data, reserved: int64(len(data))})
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
				s, err := h.start(call.Caller, &held{h: h, reserved: req.Size, upload: true})
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
	}
	p.data = append(p.data, call.Data...)
	p.next++
	return ack(seq)
}

// read answers chunk seq of a parked reply. Chunks are fixed slices of the
// reply, so any may be read again, in any order.
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
	start := seq * int64(h.chunk)
	end := min(start+int64(h.chunk), size)
	return chunkHeader(seq, seq == chunks-1), p.data[start:end], nil
}

// take hands over an uploaded request body and closes its session.
func (h *OverflowHost) take(id, secret, caller string) ([]byte, error) {
	if owner := wire.OwnerOf(id); owner != h.t.owner {
		return nil, fmt.Errorf("%w: the uploaded request %q is held by engine %q", wire.ErrUnavailable, id, owner)
	}
	data, err := h.t.use(wire.SessionRef{ID: id, Secret: secret}, caller, func(s *session) ([]byte, error) {
		p := s.state.(*held)
		if !p.upload {
			return nil, fmt.Errorf("%w: overflow session %q is a reply, not a request", ports.ErrInvalidArgument, id)
		}
		if int64(len(p.data)) != p.reserved {
			return nil, fmt.Errorf("%w: overflow request %q: %d of %d bytes uploaded", ports.ErrInvalidArgument, id, len(p.data), p.reserved)
		}
		data := p.data
		h.t.closeLocked(s)
		return data, nil
	})
	if errors.Is(err, ports.ErrNotFound) {
		return nil, fmt.Errorf("%w: header %s: no uploaded request %q (expired?)", ports.ErrInvalidArgument, wire.OverflowRequestHeader, id)
	}
	return data, err
}

// uploaded replaces the body of a call that names an uploaded request.
func (h *Host) uploaded(call *Call) error {
	id := call.Header.Get(wire.OverflowRequestHeader)
	if id == "" {
		return nil
	}
	if h.opts.Overflow == nil {
		return fmt.Errorf("%w: header %s: this engine takes no uploaded requests", ports.ErrInvalidArgument, wire.OverflowRequestHeader)
	}
	data, err := h.opts.Overflow.take(id, call.Header.Get(wire.OverflowSecretHeader), call.Caller)
	if err != nil {
		return err
	}
	call.Data = data
	return nil
}

// parkIfLarge parks a reply too large for one message when the call can
// take it, and answers with the headers that name it instead.
func (h *Host) parkIfLarge(call *Call, data []byte) (nats.Header, []byte, error) {
	most := int(h.opts.Replies.MaxPayload()) - replyHeadroom
	if len(data) <= most {
		return nil, data, nil
	}
	if call.Header.Get(wire.OverflowHeader) != "1" || h.opts.Overflow == nil {
		return nil, nil, fmt.Errorf("%w: the reply of %d bytes passes the %d one message holds; send %s: 1 to fetch it in chunks",
			ports.ErrTooLarge, len(data), most, wire.OverflowHeader)
	}
	s, err := h.opts.Overflow.park(call.Caller, data)
	if err != nil {
		return nil, nil, err
	}
	return nats.Header{
		wire.OverflowReplyHeader:  {s.id},
		wire.OverflowSecretHeader: {s.secret},
		wire.OverflowSizeHeader:   {strconv.Itoa(len(data))},
	}, nil, nil
}
