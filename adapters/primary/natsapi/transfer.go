package natsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// Transfer limits by default.
const (
	DefaultTransferIdle = 60 * time.Second
	DefaultMaxTransfers = 32
	// DefaultTransferChunkSize is a quarter of NATS's default max payload.
	// Each chunk costs a round trip, so bigger chunks move an object
	// faster (BenchmarkObjectTransfer in natsclient compares the sizes).
	// It stays at 256 KiB for the HTTP API's slowest client: at the 8 KiB/s
	// it allows, a chunk fills in 32 s, well within the transfer's idle
	// time, where 512 KiB would take 64 s and the engine would close the
	// transfer under it. An upload that keeps to its window holds at most
	// seven chunks in the engine (two queued, one in the store, one being
	// handed over, three ahead of their turn in a window of four), 56 MiB
	// for all 32 transfers; a download keeps its window, four.
	DefaultTransferChunkSize = 256 << 10
	// transferQueue is how many uploaded chunks wait for the store at
	// most; a write is answered once its chunk is queued, which paces
	// the uploader.
	transferQueue = 2
	// DefaultTransferWindow is how many chunks an uploader sends, or a
	// downloader asks for, before the first is answered.
	DefaultTransferWindow = 4
)

// TransferOptions configure a TransferHost.
type TransferOptions struct {
	// Owner is the engine's instance id; transfer ids start with it.
	Owner string
	// Conn is the engine's session connection: it carries the owner
	// subscription and its replies, and outlives the accepting connection.
	Conn *nats.Conn
	// CallerSecret, when set, requires every session call to carry a
	// valid token naming the caller that opened the transfer.
	CallerSecret []byte
	// Idle closes a transfer with no call for this long; 0 means 60 s.
	Idle time.Duration
	// MaxOpen bounds the open transfers; 0 means 32.
	MaxOpen int
	// MaxOpenPerCaller bounds the transfers of one caller (see Call.Who);
	// 0 means a quarter of MaxOpen.
	MaxOpenPerCaller int
	// ChunkSize is the most data one message carries; 0 means 256 KiB. It
	// may not pass half the connection's max payload, which leaves room
	// for base64 and the JSON around it.
	ChunkSize int
	// Window is how many chunks an uploader may send, or a downloader ask
	// for, before the first of them is answered, at most 16; 0 means 4, 1
	// one at a time. The engine holds up to Window-1 uploaded chunks that
	// come before their turn, and keeps a download's last Window chunks
	// read.
	Window int
	Logger *slog.Logger
	// Admit is asked before every session call, as the Host's is before
	// every call: whether the engine may serve now (not: 503), and the
	// fencing token of the term it serves under. A transfer's store calls
	// carry the token of the term the call that opened it ran under, and
	// a session call that finds the engine under another term closes the
	// transfer. nil: always, and a transfer is never closed for its term.
	Admit func() (token uint64, ok bool)
}

// TransferHost holds the object transfers of one engine instance. Opens
// arrive through the object_storage service on its queue group, so they
// end with the Host's StopAccepting; every later message comes on
// abi.svc.object_storage.v1.<owner>.<operation>, which only this instance
// subscribes to, and keeps working until Stop.
type TransferHost struct {
	t      *sessionTable
	chunk  int
	window int
}

var _ SessionHost = (*TransferHost)(nil)

// NewTransferHost checks the options and returns a host that does not
// serve yet.
func NewTransferHost(opts TransferOptions) (*TransferHost, error) {
	if opts.Owner == "" || opts.Conn == nil {
		return nil, errors.New("natsapi: a transfer host needs an Owner and a Conn")
	}
	if opts.Idle < 0 || opts.MaxOpen < 0 || opts.ChunkSize < 0 || opts.MaxOpenPerCaller < 0 || opts.Window < 0 {
		return nil, fmt.Errorf("natsapi: transfer limits %v idle, %d open, %d-byte chunks, a window of %d: none may be negative", opts.Idle, opts.MaxOpen, opts.ChunkSize, opts.Window)
	}
	switch {
	case opts.Window == 0:
		opts.Window = DefaultTransferWindow
	case opts.Window > wire.MaxTransferWindow:
		return nil, fmt.Errorf("natsapi: a transfer window of %d chunks, the most is %d", opts.Window, wire.MaxTransferWindow)
	}
	if opts.Idle == 0 {
		opts.Idle = DefaultTransferIdle
	}
	if opts.MaxOpen == 0 {
		opts.MaxOpen = DefaultMaxTransfers
	}
	if opts.MaxOpenPerCaller == 0 {
		opts.MaxOpenPerCaller = max(1, opts.MaxOpen/4)
	}
	most := int(opts.Conn.MaxPayload() / 2)
	switch {
	case opts.ChunkSize == 0:
		opts.ChunkSize = min(DefaultTransferChunkSize, most)
	case opts.ChunkSize > most:
		return nil, fmt.Errorf("natsapi: transfer chunks of %d bytes pass half the connection's max payload (%d)", opts.ChunkSize, most)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	prefix := wire.SubjectPrefix + ports.ServiceObjectStorage + ".v1"
	h := &TransferHost{
		t:      newSessionTable("transfer", prefix, opts.Owner, opts.Conn, opts.CallerSecret, opts.Idle, opts.MaxOpen, opts.MaxOpenPerCaller, opts.Logger),
		chunk:  opts.ChunkSize,
		window: opts.Window,
	}
	if opts.Admit != nil {
		h.t.admit, h.t.terms = opts.Admit, true
	}
	// A transfer may have its window of writes in hand, all waiting on its
	// store, and a write sent again and the commit besides; more is
	// refused. The table handles that many calls for every transfer at
	// once, and its own 64 for the calls not counted (closes, calls naming
	// no open session), so stalled stores never hold up the subscription.
	h.t.inHand = int32(opts.Window + 2)
	h.t.sem = make(chan struct{}, cap(h.t.sem)+opts.MaxOpen*(opts.Window+2))
	h.t.ops[wire.SessionWrite] = h.write
	h.t.ops[wire.SessionCommit] = h.commit
	h.t.ops[wire.SessionRead] = h.read
	return h, nil
}

// Serve subscribes the owner subject. After Stop it serves again.
func (h *TransferHost) Serve() error { return h.t.serve() }

// Open is how many transfers are open.
func (h *TransferHost) Open() int { return h.t.count() }

// StopAccepting does nothing: opens come through the Host, whose own
// StopAccepting ends them, and open transfers go on.
func (h *TransferHost) StopAccepting(context.Context) error { return nil }

// Wait returns once no transfer is open, or ctx ends.
func (h *TransferHost) Wait(ctx context.Context) error { return h.t.wait(ctx) }

// Stop closes every transfer; their later calls find nobody.
func (h *TransferHost) Stop() { h.t.stop() }

// Fence closes every transfer at once and ends the owner subscription, waiting
// on nothing; confirm waits, bounded, for the broker.
func (h *TransferHost) Fence() (confirm func()) { return h.t.fence() }

// open starts a transfer on store for the caller, counted against who,
// under the term of ctx, the context of the call that opens it: every
// store call of the transfer carries its fencing token, as that call's
// own would, though they run after it has been answered.
func (h *TransferHost) open(ctx context.Context, store ports.ObjectStorage, caller, who string, req wire.TransferOpen) (wire.SessionOpened, error) {
	if req.Mode != wire.TransferPut && req.Mode != wire.TransferGet {
		return wire.SessionOpened{}, fmt.Errorf("%w: field \"mode\": %q, want \"put\" or \"get\"", ports.ErrInvalidArgument, req.Mode)
	}
	if ctx.Err() != nil {
		// The engine stopped serving (the period of the call ended) and
		// may serve again under another term: nothing is opened.
		return wire.SessionOpened{}, fmt.Errorf("%w: the engine stopped before the transfer opened", wire.ErrUnavailable)
	}
	token, _ := ports.FencingToken(ctx)
	s, err := h.t.add(token, caller, who, h.t.idle)
	if err != nil {
		return wire.SessionOpened{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed { // the engine stopped between add and here: nothing to start
		return wire.SessionOpened{}, fmt.Errorf("%w: this engine takes no new transfers", wire.ErrUnavailable)
	}
	opened := wire.SessionOpened{ID: s.id, Secret: s.secret, ChunkSize: h.chunk, Window: h.window}
	if req.Mode == wire.TransferPut {
		s.state = startUpload(s.ctx, h.t.logger, store, req)
		return opened, nil
	}
	// A Get that panics fails the open (500) and its caller never learns
	// of the transfer: it is closed, or it held a transfer of the caller's
	// and the engine's, and the drain waited on it, for its idle time.
	got := false
	defer func() {
		if !got {
			h.t.closeLocked(s)
		}
	}()
	r, info, err := store.Get(s.ctx, req.Key, ports.GetObjectOptions{Offset: req.Offset, Length: req.Length})
	got = true
	if err != nil {
		h.t.closeLocked(s)
		return wire.SessionOpened{}, err
	}
	s.state = &download{r: r, left: req.Span(info.Size)}
	wi := wire.InfoOf(info)
	opened.Object = &wi
	return opened, nil
}

// upload streams chunks into a Put running on its own goroutine: chunks
// wait in a short queue, a feeder writes them into a pipe, Put reads it.
// A chunk that comes before its turn, within the window, waits in ahead
// and is answered at once; its turn comes when the chunks before it are
// queued.
type upload struct {
	chunks    chan []byte
	pw        *io.PipeWriter
	next      int64            // the sequence number the next chunk must carry
	ahead     map[int64][]byte // chunks that came before their turn, within the window
	committed bool
	done      chan struct{} // closed when Put has returned
	info      ports.ObjectInfo
	err       error
}

func startUpload(ctx context.Context, log *slog.Logger, store ports.ObjectStorage, req wire.TransferOpen) *upload {
	pr, pw := io.Pipe()
	u := &upload{chunks: make(chan []byte, transferQueue), pw: pw, done: make(chan struct{})}
	go func() {
		for {
			select {
			case c, ok := <-u.chunks:
				if !ok {
					_ = pw.Close()
					return
				}
				if _, err := pw.Write(c); err != nil {
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() {
		var info ports.ObjectInfo
		_, err := unpanicked(log, "the upload of "+req.Key, func() (_ []byte, err error) {
			info, err = store.Put(ctx, req.Key, pr, ports.PutObjectOptions{ContentType: req.ContentType, IfAbsent: req.IfAbsent, IfMatch: req.IfMatch})
			return nil, err
		})
		if err == nil {
			_ = pr.Close()
		} else {
			_ = pr.CloseWithError(err)
		}
		u.info, u.err = info, err
		close(u.done)
	}()
	return u
}

// release aborts a Put still reading: it sees an error, never a short
// object.
func (u *upload) release() { u.pw.CloseWithError(errSessionClosed) }

// committing: once committed, the Put may store the object whatever ends
// the transfer.
func (u *upload) committing() bool { return u.committed }

// result waits for Put, unless the session closes first. A Put cut off
// by the close may or may not have stored the object: that is 500, never
// 503, which says nothing was done.
func (u *upload) result(ctx context.Context) (ports.ObjectInfo, error) {
	select {
	case <-u.done:
	case <-ctx.Done():
		select {
		case <-u.done:
		default:
			return ports.ObjectInfo{}, fmt.Errorf("%w: the transfer closed while its commit ran", wire.ErrInterrupted)
		}
	}
	if u.err != nil && ctx.Err() != nil {
		return ports.ObjectInfo{}, fmt.Errorf("%w: the transfer closed while its commit ran: %w", wire.ErrInterrupted, u.err)
	}
	return u.info, u.err
}

// download reads the object forward, one chunk at a time, as reads ask for
// it. A read that comes before its turn, within the window, reads the
// chunks before it too; they are kept, with the window of chunks before
// them, so a read that comes later, or is sent again, gets its chunk.
type download struct {
	r    io.ReadCloser
	left int64            // bytes of the range not yet read, as the store described it
	next int64            // the next chunk to read from the store
	kept map[int64][]byte // chunks next-window to next-1
	done bool             // the store's end was read: chunk next-1 is the last
	err  error            // the store failed part way through chunk next: no later read is answered
}

func (d *download) release() { _ = d.r.Close() }

func (h *TransferHost) write(s *session, call *sessionCall) (nats.Header, []byte, error) {
	seq, err := call.seq()
	if err != nil {
		return nil, nil, err
	}
	u, ok := s.state.(*upload)
	switch {
	case !ok:
		return nil, nil, fmt.Errorf("%w: transfer %q is a download: it takes no write", ports.ErrInvalidArgument, s.id)
	case u.committed:
		return nil, nil, fmt.Errorf("%w: transfer %q is committed: it takes no write", ports.ErrConflict, s.id)
	case seq < u.next:
		return ack(seq) // sent again: already held
	case seq >= u.next+int64(h.window):
		want := strconv.FormatInt(u.next, 10)
		if h.window > 1 {
			want += " to " + strconv.FormatInt(u.next+int64(h.window)-1, 10)
		}
		return nil, nil, fmt.Errorf("%w: transfer %q: write seq %d, want %s", ports.ErrConflict, s.id, seq, want)
	case len(call.Data) > h.chunk:
		return nil, nil, fmt.Errorf("%w: transfer %q: a chunk of %d bytes, the most is %d", ports.ErrTooLarge, s.id, len(call.Data), h.chunk)
	case seq > u.next:
		if u.ahead == nil {
			u.ahead = make(map[int64][]byte, h.window-1)
		}
		u.ahead[seq] = call.Data // sent again before its turn: the later copy, the same bytes
		return ack(seq)
	}
	for data := call.Data; ; {
		if err := u.queue(s, data); err != nil {
			return nil, nil, err
		}
		u.next++
		var ok bool
		if data, ok = u.ahead[u.next]; !ok {
			return ack(seq)
		}
		delete(u.ahead, u.next)
	}
}

// queue hands chunk u.next to the store's feeder, waiting for room.
func (u *upload) queue(s *session, data []byte) error {
	select {
	case u.chunks <- data:
		return nil
	case <-u.done:
	case <-s.ctx.Done():
	}
	switch {
	case s.ctx.Err() != nil: // closed: the store's error is the close's doing
		return errClosed(s)
	case u.err != nil:
		return u.err
	}
	return fmt.Errorf("%w: transfer %q: the object ended before seq %d", ports.ErrConflict, s.id, u.next)
}

func ack(seq int64) (nats.Header, []byte, error) {
	data, err := json.Marshal(wire.ChunkAck{Seq: seq})
	return nil, data, err
}

func (h *TransferHost) commit(s *session, call *sessionCall) (nats.Header, []byte, error) {
	var req wire.TransferCommit
	if err := Decode(call.Data, &req); err != nil {
		return nil, nil, err
	}
	u, ok := s.state.(*upload)
	switch {
	case !ok:
		return nil, nil, fmt.Errorf("%w: transfer %q is a download: there is nothing to commit", ports.ErrInvalidArgument, s.id)
	case req.Chunks != u.next || len(u.ahead) > 0:
		return nil, nil, fmt.Errorf("%w: transfer %q: commit after %d chunks, the engine holds %d in order and %d ahead of a gap", ports.ErrConflict, s.id, req.Chunks, u.next, len(u.ahead))
	case !u.committed:
		u.committed = true
		close(u.chunks)
	}
	info, err := u.result(s.ctx)
	if err != nil {
		return nil, nil, err
	}
	data, err := json.Marshal(wire.InfoOf(info))
	return nil, data, err
}

func (h *TransferHost) read(s *session, call *sessionCall) (nats.Header, []byte, error) {
	seq, err := call.seq()
	if err != nil {
		return nil, nil, err
	}
	d, ok := s.state.(*download)
	switch {
	case !ok:
		return nil, nil, fmt.Errorf("%w: transfer %q is an upload: it takes no read", ports.ErrInvalidArgument, s.id)
	case d.err != nil:
		return nil, nil, d.err
	case seq < d.next-int64(h.window) || seq >= d.next+int64(h.window):
		want := strconv.FormatInt(max(d.next-int64(h.window), 0), 10)
		if last := d.next + int64(h.window) - 1; last > 0 {
			want += " to " + strconv.FormatInt(last, 10)
		}
		return nil, nil, fmt.Errorf("%w: transfer %q: read seq %d, want %s", ports.ErrConflict, s.id, seq, want)
	}
	for !d.done && seq >= d.next {
		if err := h.readNext(s, d); err != nil {
			return nil, nil, err
		}
	}
	data, ok := d.kept[seq]
	if !ok { // past the end, asked for ahead: the last chunk came before it
		return chunkHeader(seq, true), nil, nil
	}
	return chunkHeader(seq, d.done && seq == d.next-1), data, nil
}

// readNext reads chunk d.next from the store and keeps it, and lets go of
// the chunk that leaves the window.
func (h *TransferHost) readNext(s *session, d *download) error {
	if s.ctx.Err() != nil { // closed while a read read on: it reads no more
		return errClosed(s)
	}
	// A fresh buffer each time: chunks are kept, and sent after the lock
	// is let go. A last chunk gets a buffer of its size, and one byte more
	// to find the end in the same read.
	buf := make([]byte, min(int64(h.chunk), max(d.left, 0)+1))
	read := false
	defer func() {
		if !read {
			// The store panicked (the call answers 500) part way through
			// chunk next, as a failure would: every later read fails too.
			d.err = fmt.Errorf("transfer %q: read the object at chunk %d: %w", s.id, d.next, errPanicked)
		}
	}()
	n, err := io.ReadFull(d.r, buf)
	read = true
	d.left -= int64(n)
	switch {
	case (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) && d.left > 0:
		// Ended short of the size the open described: its last chunk
		// must not read as the object's end.
		d.err = fmt.Errorf("transfer %q: the object ended %d bytes short of the size it was described with", s.id, d.left)
		return d.err
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		d.done = true
	case s.ctx.Err() != nil: // closed while it read: the store's error is the close's doing
		return errClosed(s)
	case err != nil:
		// The stream has moved past what was read of chunk next: a
		// read of it again would answer the bytes after them.
		d.err = fmt.Errorf("transfer %q: read the object at chunk %d: %w", s.id, d.next, err)
		return d.err
	case d.left < 0:
		d.err = fmt.Errorf("transfer %q: the object runs past the size it was described with", s.id)
		return d.err
	}
	if d.kept == nil {
		d.kept = make(map[int64][]byte, h.window)
	}
	d.kept[d.next] = buf[:n]
	delete(d.kept, d.next-int64(h.window))
	d.next++
	return nil
}

// errClosed is the answer of a call whose transfer closed while it waited
// or read: the store's error, if any, is the close's doing.
func errClosed(s *session) error {
	return fmt.Errorf("%w: transfer %q was closed", wire.ErrUnavailable, s.id)
}

// chunkHeader numbers a chunk read and says whether it is the last.
func chunkHeader(seq int64, done bool) nats.Header {
	h := nats.Header{wire.SeqHeader: {strconv.FormatInt(seq, 10)}}
	if done {
		h.Set(wire.DoneHeader, "1")
	}
	return h
}
