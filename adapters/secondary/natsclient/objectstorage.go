package natsclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// ObjectStorage is the object_storage service of the serving engine.
// Objects move through transfers, one chunk per message, so neither side
// holds a whole object.
type ObjectStorage struct{ c *Client }

var _ ports.ObjectStorage = ObjectStorage{}

// NewObjectStorage calls the object_storage service through c.
func NewObjectStorage(c *Client) ObjectStorage { return ObjectStorage{c: c} }

func osSubject(op string) string { return wire.Subject(ports.ServiceObjectStorage, op) }

func transferSubject(id, op string) string {
	return wire.OwnerSubject(ports.ServiceObjectStorage, wire.OwnerOf(id), op)
}

// lateOpen is how long past its caller's deadline an open still waits
// for the engine's answer, to close the transfer it names: the engine's
// transfer idle time, after which the engine has closed it itself.
const lateOpen = time.Minute

// open opens a transfer. The engine opens it whether or not its caller
// still waits, and only its answer names it: so the open waits for that
// answer apart from the caller, until lateOpen past the caller's
// deadline, and a transfer opened for a caller that gave up, or whose
// deadline passed, is closed. Left open, it held one of the caller's share
// of transfers for the engine's idle time. The open is sent again while
// nobody serves only within the caller's own time, and a caller whose
// deadline passes after such refusals is told the last of them: no engine
// served, not that it waited too long.
func (o ObjectStorage) open(ctx context.Context, req wire.TransferOpen) (wire.SessionOpened, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.c.timeout)
		defer cancel()
	}
	subject := osSubject(wire.OSTransferOpen)
	data, err := json.Marshal(req)
	if err != nil {
		return wire.SessionOpened{}, fmt.Errorf("%s: encode: %w", subject, err)
	}
	deadline, _ := ctx.Deadline()
	type opening struct {
		msg *nats.Msg
		err error
	}
	answer := make(chan opening, 1)
	var mu sync.Mutex
	var refused error // the last refusal of an attempt sent again
	go func() {
		var pace backoff
		for {
			actx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline.Add(lateOpen))
			msg, err := o.c.request(actx, subject, data, nil, false)
			cancel()
			// Only a refusal that did nothing is sent again, and only
			// while the caller waits.
			if err == nil || !errors.Is(err, wire.ErrUnavailable) || !pace.again(ctx) {
				answer <- opening{msg, err}
				return
			}
			mu.Lock()
			refused = err
			mu.Unlock()
		}
	}()
	var a opening
	select {
	case a = <-answer:
	case <-ctx.Done():
		select {
		case a = <-answer: // answered as the caller's time ran out
		default:
			go func() {
				if a := <-answer; a.err == nil {
					var opened wire.SessionOpened
					if json.Unmarshal(a.msg.Data, &opened) == nil && opened.ID != "" {
						o.close(opened)
					}
				}
			}()
			mu.Lock()
			last := refused
			mu.Unlock()
			if last != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return wire.SessionOpened{}, last
			}
			return wire.SessionOpened{}, fmt.Errorf("%s: %w", subject, ctx.Err())
		}
	}
	if a.err != nil {
		return wire.SessionOpened{}, a.err
	}
	var opened wire.SessionOpened
	if err := json.Unmarshal(a.msg.Data, &opened); err != nil {
		return wire.SessionOpened{}, fmt.Errorf("%s: decode the answer: %w", subject, err)
	}
	if opened.ChunkSize <= 0 {
		o.close(opened)
		return opened, fmt.Errorf("transfer %q: chunk size %d", opened.ID, opened.ChunkSize)
	}
	return opened, nil
}

func (o ObjectStorage) close(opened wire.SessionOpened) {
	o.c.closeSession(transferSubject(opened.ID, wire.SessionClose), opened.Ref())
}

// firstChunk is the most an upload's first chunk takes before it knows
// the object is larger.
const firstChunk = 16 << 10

// commitCalls is how many calls' time a commit gets.
const commitCalls = 4

// Put implements ports.ObjectStorage: it reads r one chunk at a time and
// writes the chunks in sequence, as many ahead of the first unanswered
// as the engine's window allows, then commits. Any failure closes the
// transfer, which aborts the engine's Put.
func (o ObjectStorage) Put(ctx context.Context, key string, r io.Reader, opts ports.PutObjectOptions) (ports.ObjectInfo, error) {
	if err := errors.Join(text("key", key), text("content type", opts.ContentType), text("if match", opts.IfMatch)); err != nil {
		return ports.ObjectInfo{}, err
	}
	opened, err := o.open(ctx, wire.TransferOpen{Mode: wire.TransferPut, Key: key, ContentType: opts.ContentType, IfAbsent: opts.IfAbsent, IfMatch: opts.IfMatch})
	if err != nil {
		return ports.ObjectInfo{}, err
	}
	defer o.close(opened)
	w := o.writer(ctx, opened)
	defer w.stop()
	// The first chunk starts small, so a small object does not cost a
	// whole chunk's buffer; once it fills, the rest go in whole chunks.
	buf := make([]byte, min(opened.ChunkSize, firstChunk))
	last := time.Now() // when the engine last heard of this upload
	for {
		n, rerr := o.fill(r, buf, last)
		if rerr == nil && n == len(buf) && len(buf) < opened.ChunkSize {
			whole := make([]byte, opened.ChunkSize)
			copy(whole, buf)
			m, err := o.fill(r, whole[n:], last)
			buf, n, rerr = whole, n+m, err
		}
		if n > 0 {
			if err := w.write(buf[:n]); err != nil {
				return ports.ObjectInfo{}, err
			}
			last = time.Now()
		}
		// Only the reader's own end is the object's end: a reader that
		// fails, io.ErrUnexpectedEOF included (a body cut short), stores
		// nothing.
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return ports.ObjectInfo{}, fmt.Errorf("put %q: read: %w", key, rerr)
		}
		buf = w.buffer(len(buf))
	}
	if err := w.flush(); err != nil {
		return ports.ObjectInfo{}, err
	}
	body, err := json.Marshal(wire.TransferCommit{Chunks: w.seq})
	if err != nil {
		return ports.ObjectInfo{}, err
	}
	// The commit waits on what the engine still holds for the store: two
	// chunks queued and one being written, at most, and the store's own
	// finish. It gets a call's time for each.
	cctx, cancel := w.callContext(commitCalls)
	defer cancel()
	msg, err := o.c.inSession(cctx, transferSubject(opened.ID, wire.SessionCommit), opened.Ref(), -1, body)
	if err != nil {
		return ports.ObjectInfo{}, err
	}
	var info wire.ObjectInfo
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		return ports.ObjectInfo{}, fmt.Errorf("put %q: decode the commit's answer: %w", key, err)
	}
	return info.Info(), nil
}

// fill reads into buf until it is full or r ends or fails, as
// objread.Full does, or until, with bytes read, the client's upload flush
// time has passed since last: the engine then hears of an upload whose
// reader is slow but alive before its transfer's idle time closes it.
func (o ObjectStorage) fill(r io.Reader, buf []byte, last time.Time) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
		if n > 0 && n < len(buf) && time.Since(last) >= o.c.flush {
			return n, nil
		}
	}
	return n, nil
}

// chunkWriter sends an upload's chunks, each as its own request, with up
// to window of them unanswered. The engine holds a chunk that comes
// before its turn, so their order on the way does not matter.
type chunkWriter struct {
	o       ObjectStorage
	ctx     context.Context
	cancel  context.CancelFunc
	subject string
	ref     wire.SessionRef
	window  int
	timeout time.Duration // a call's, for each chunk it may wait on; 0 when ctx has a deadline
	seq     int64         // the next chunk's number
	sent    []pending     // oldest first
	spare   [][]byte      // buffers of answered chunks, for the next reads
}

type pending struct {
	buf []byte
	err chan error
}

func (o ObjectStorage) writer(ctx context.Context, opened wire.SessionOpened) *chunkWriter {
	// An engine that does not say takes one chunk at a time.
	// One that names more than an engine may is held to that, which bounds
	// the chunks, and their buffers, a Put keeps out at once.
	window := min(max(opened.Window, 1), wire.MaxTransferWindow)
	w := &chunkWriter{o: o, subject: transferSubject(opened.ID, wire.SessionWrite), ref: opened.Ref(), window: window}
	w.ctx, w.cancel = context.WithCancel(ctx)
	// The engine answers a chunk once the chunks before it, and those kept
	// aside behind it, are queued for its store: a chunk may wait on two
	// windows of chunks, and gets the time the client gives one call for
	// each, as when chunks went one at a time.
	if _, ok := ctx.Deadline(); !ok {
		w.timeout = o.c.timeout
	}
	return w
}

// write sends chunk as the next chunk, once the window has room for it.
// The chunk is not to be touched until it is answered.
func (w *chunkWriter) write(chunk []byte) error {
	if len(w.sent) == w.window {
		if err := w.oldest(); err != nil {
			return err
		}
	}
	p := pending{buf: chunk[:cap(chunk)], err: make(chan error, 1)}
	go func(seq int64) {
		ctx, cancel := w.callContext(2 * w.window)
		defer cancel()
		_, err := w.o.c.inSession(ctx, w.subject, w.ref, seq, chunk)
		p.err <- err
	}(w.seq)
	w.seq++
	w.sent = append(w.sent, p)
	return nil
}

// buffer is a buffer of size bytes for the next chunk: one whose chunk
// was answered, or a new one.
func (w *chunkWriter) buffer(size int) []byte {
	if k := len(w.spare); k > 0 && len(w.spare[k-1]) == size {
		buf := w.spare[k-1]
		w.spare = w.spare[:k-1]
		return buf
	}
	return make([]byte, size)
}

// callContext is the context of one call of the upload that may wait on
// the store for as many chunks as calls.
func (w *chunkWriter) callContext(calls int) (context.Context, context.CancelFunc) {
	return transferCall(w.ctx, w.timeout, calls)
}

// transferCall is the context of one call of a transfer that may wait on
// the store for as many chunks as calls: a call's timeout for each, or
// the transfer's own deadline when timeout is 0.
func transferCall(ctx context.Context, timeout time.Duration, calls int) (context.Context, context.CancelFunc) {
	if timeout > 0 {
		return context.WithTimeout(ctx, time.Duration(calls)*timeout)
	}
	return context.WithCancel(ctx)
}

// oldest waits for the oldest unanswered chunk.
func (w *chunkWriter) oldest() error {
	p := w.sent[0]
	w.sent = w.sent[1:]
	if err := <-p.err; err != nil {
		return err
	}
	w.spare = append(w.spare, p.buf)
	return nil
}

// flush waits for every chunk sent.
func (w *chunkWriter) flush() error {
	for len(w.sent) > 0 {
		if err := w.oldest(); err != nil {
			return err
		}
	}
	return nil
}

// stop gives up on chunks still unanswered and waits for their requests
// to return, so none outlives the Put.
func (w *chunkWriter) stop() {
	w.cancel()
	for _, p := range w.sent {
		<-p.err
	}
	w.sent = nil
}

// Get implements ports.ObjectStorage: the reader asks for the engine's
// window of chunks ahead of what it has handed on, and Close closes the
// transfer.
func (o ObjectStorage) Get(ctx context.Context, key string, opts ports.GetObjectOptions) (io.ReadCloser, ports.ObjectInfo, error) {
	if err := text("key", key); err != nil {
		return nil, ports.ObjectInfo{}, err
	}
	req := wire.TransferOpen{Mode: wire.TransferGet, Key: key, Offset: opts.Offset, Length: opts.Length}
	opened, err := o.open(ctx, req)
	if err != nil {
		return nil, ports.ObjectInfo{}, err
	}
	if opened.Object == nil {
		o.close(opened)
		return nil, ports.ObjectInfo{}, fmt.Errorf("transfer %q: the engine did not describe %q", opened.ID, key)
	}
	return o.reader(ctx, opened, req), opened.Object.Info(), nil
}

// reader is the download opened describes, of the range req names.
func (o ObjectStorage) reader(ctx context.Context, opened wire.SessionOpened, req wire.TransferOpen) *reader {
	r := &reader{o: o, opened: opened, subject: transferSubject(opened.ID, wire.SessionRead)}
	r.ctx, r.cancel = context.WithCancel(ctx)
	// An engine that does not say answers reads one at a time.
	r.window = min(max(opened.Window, 1), wire.MaxTransferWindow)
	// The engine reads a chunk's size at a time and ends with the chunk
	// that is short, empty if the range fills its chunks: no read is
	// sent ahead past that, unless the object turns out longer.
	if opened.Object != nil && opened.ChunkSize > 0 {
		r.chunks = req.Span(opened.Object.Size)/int64(opened.ChunkSize) + 1
	}
	// The engine reads ahead to answer a read that comes before its turn:
	// a read may wait on a window of chunks, and gets the time the client
	// gives one call for each.
	if _, ok := ctx.Deadline(); !ok {
		r.timeout = o.c.timeout
	}
	return r
}

// reader is a download that keeps up to window reads unanswered. Read
// is for one goroutine at a time; Close may come from another, and ends a
// Read that waits.
type reader struct {
	o       ObjectStorage
	ctx     context.Context
	cancel  context.CancelFunc
	opened  wire.SessionOpened
	subject string
	window  int
	timeout time.Duration // a call's, for each chunk a read may wait on; 0 when ctx has a deadline
	chunks  int64         // how many chunks the range takes, as the engine described it

	// Read's own.
	seq   int64       // the next chunk to ask for
	asked []chunkRead // oldest first
	buf   []byte
	done  bool
	err   error

	mu     sync.Mutex // guards closed, and a read's start against Close's wait
	closed bool
	reads  sync.WaitGroup
}

// chunkRead is one read in flight; answer gets its outcome.
type chunkRead struct{ answer chan chunkAnswer }

type chunkAnswer struct {
	data []byte
	done bool
	err  error
}

func (r *reader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		switch {
		case r.err != nil:
			return 0, r.err
		case r.done:
			return 0, io.EOF
		case !r.ask():
			return 0, fmt.Errorf("transfer %q: read after close", r.opened.ID)
		}
		a := <-r.asked[0].answer
		r.asked = r.asked[1:]
		if a.err != nil {
			r.err = a.err
			r.stop()
			return 0, a.err
		}
		r.buf, r.done = a.data, a.done
		if r.done {
			r.stop() // reads sent past the end get nothing
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// ask sends reads until the window is full, or every chunk of the range
// is asked for, and always leaves one read in flight; it reports false
// once the reader is closed.
func (r *reader) ask() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	for len(r.asked) < r.window && (r.seq < r.chunks || len(r.asked) == 0) {
		c := chunkRead{answer: make(chan chunkAnswer, 1)}
		seq := r.seq
		r.reads.Go(func() {
			ctx, cancel := transferCall(r.ctx, r.timeout, r.window)
			defer cancel()
			data, done, err := r.o.c.readChunk(ctx, r.subject, r.opened.Ref(), seq)
			c.answer <- chunkAnswer{data, done, err}
		})
		r.seq++
		r.asked = append(r.asked, c)
	}
	return true
}

// stop gives up on the reads in flight and waits for them to return, so
// none outlives the reader.
func (r *reader) stop() {
	r.cancel()
	r.reads.Wait()
	r.asked = nil
}

// Close gives up on the reads in flight, waits for them, and closes the
// transfer. A Read waiting meanwhile returns the error of its read.
func (r *reader) Close() error {
	r.mu.Lock()
	closed := r.closed
	r.closed = true
	r.mu.Unlock()
	if !closed {
		r.cancel()
		r.reads.Wait()
		r.o.close(r.opened)
	}
	return nil
}

// Stat implements ports.ObjectStorage.
func (o ObjectStorage) Stat(ctx context.Context, key string) (ports.ObjectInfo, error) {
	if err := text("key", key); err != nil {
		return ports.ObjectInfo{}, err
	}
	var info wire.ObjectInfo
	err := o.c.Call(ctx, osSubject(wire.OSStat), wire.OSKey{Key: key}, &info)
	return info.Info(), err
}

// Delete implements ports.ObjectStorage.
func (o ObjectStorage) Delete(ctx context.Context, key string) error {
	if err := text("key", key); err != nil {
		return err
	}
	return o.c.Call(ctx, osSubject(wire.OSDelete), wire.OSKey{Key: key}, nil)
}

// List implements ports.ObjectStorage.
func (o ObjectStorage) List(ctx context.Context, prefix string, limit int, cursor string) ([]ports.ObjectInfo, string, error) {
	if err := errors.Join(text("prefix", prefix), text("cursor", cursor)); err != nil {
		return nil, "", err
	}
	// The port reads any limit <= 0 as the default page; it is sent as 0,
	// the protocol's form of it.
	var out wire.OSObjects
	if err := o.c.Call(ctx, osSubject(wire.OSList), wire.OSListPage{Prefix: prefix, Limit: max(limit, 0), Cursor: cursor}, &out); err != nil {
		return nil, "", err
	}
	infos := make([]ports.ObjectInfo, len(out.Objects))
	for i, info := range out.Objects {
		infos[i] = info.Info()
	}
	return infos, out.Cursor, nil
}
