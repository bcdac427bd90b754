// Package natsapi serves the kernel services on NATS. Each service is a
// NATS micro service whose endpoints answer on abi.svc.<service>.v1.<op>,
// one queue group per service.
//
// A Host counts every call it receives, so a handover answers them all:
// StopAccepting ends the queue subscriptions at the broker and returns once
// every call delivered before that is counted; Wait returns once those are
// answered; Stop cancels what is left. micro's own Stop cannot do this: it
// drains the subscriptions but gives no way to wait for the handlers.
//
// The subscriptions live on a connection of their own (the accepting
// connection), which StopAccepting drains and closes; replies go out on
// the engine's session connection, which outlives it.
package natsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/abi-engine/engine/internal/callerauth"
	"github.com/abi-engine/engine/internal/strictjson"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// Call is one request as a handler sees it.
type Call struct {
	Subject string
	Data    []byte
	Header  nats.Header
	// Caller is who signed the call; "" when callers do not sign.
	Caller string
	// reply is the subject the answer goes to.
	reply string
}

// Who is whom the call's places in the queue, sessions and bytes count
// against: the connection the call came from, and Caller on it when
// callers sign. Not Caller alone: every caller holds the secret and may
// sign as another's name (the HTTP API's is "engine <instance id> http",
// and every session id names the instance), and would then use up that
// caller's share; a connection's inbox prefix is random, and a caller
// that may not subscribe to the calls never learns another's. It is
// worked out when asked rather than on every call: most calls never ask.
func (c *Call) Who() string {
	if c.Caller != "" {
		return c.Caller + " on " + connectionOf(c.reply)
	}
	return connectionOf(c.reply)
}

// HandlerFunc answers a call. ctx ends when the engine fences or the drain
// deadline passes; a handler must then stop.
type HandlerFunc func(ctx context.Context, call *Call) ([]byte, error)

// QuickFunc answers a call at once, where it arrives, when it can without
// waiting on a disk, a network or a lock held across either; ok false
// sends the call on to the endpoint's Handler as if Quick had not run.
type QuickFunc func(ctx context.Context, call *Call) (data []byte, ok bool, err error)

// Endpoint is one operation of a service.
type Endpoint struct {
	Name    string
	Handler HandlerFunc
	// Quick, when set, is tried first, on the subscription's goroutine.
	Quick QuickFunc
}

// Service is a kernel service and its operations.
type Service struct {
	Name        string
	Description string
	Endpoints   []Endpoint
	// Prefix, when set, puts the endpoints on <Prefix>.<operation> instead
	// of abi.svc.<service>.v1.<operation>.
	Prefix string
}

// JSON adapts a typed handler: the body is decoded strictly into Req (an
// unknown field or malformed JSON is a 400 naming it), Resp is encoded.
// The hot bodies have hand readers and writers (wire.FastDecoder and
// wire.FastEncoder); a body a hand reader does not take goes to Decode,
// which refuses it or reads it as before.
func JSON[Req, Resp any](f func(ctx context.Context, req Req) (Resp, error)) HandlerFunc {
	return func(ctx context.Context, call *Call) ([]byte, error) {
		var req Req
		if d, ok := any(&req).(wire.FastDecoder); !ok || !d.DecodeJSON(call.Data) {
			if err := Decode(call.Data, &req); err != nil {
				return nil, err
			}
		}
		resp, err := f(ctx, req)
		if err != nil {
			return nil, err
		}
		return wire.Marshal(resp)
	}
}

// Decode reads a JSON body strictly: no field it does not know, spelt
// exactly, once, and no more than wire.MaxValues values. An empty body, or
// one of JSON white space only, is an empty object.
func Decode(data []byte, v any) error {
	if wire.Blank(data) {
		data = []byte("{}")
	}
	if err := strictjson.Object(data); err != nil {
		return fmt.Errorf("%w: body: %v", ports.ErrInvalidArgument, err)
	}
	// Counted before anything is decoded: decoding is what costs.
	if err := strictjson.Values(data, v, wire.MaxValues); err != nil {
		return fmt.Errorf("%w: body: %v", ports.ErrInvalidArgument, err)
	}
	// A field it does not know is refused by ExactFields, below.
	if err := strictjson.Unmarshal(data, v); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			want := typeErr.Type.String()
			switch {
			case wire.IsBytes(typeErr.Type):
				want = "base64"
			case wire.IsSeconds(typeErr.Type):
				want = "a number of seconds, 0 or " + strconv.FormatFloat(ports.MinTTL.Seconds(), 'f', -1, 64) +
					" to " + strconv.FormatFloat(ports.MaxTTL.Seconds(), 'f', -1, 64)
			}
			return fmt.Errorf("%w: field %q: want %s", ports.ErrInvalidArgument, typeErr.Field, want)
		}
		return fmt.Errorf("%w: body: %v", ports.ErrInvalidArgument, err)
	}
	if err := strictjson.ExactFields(data, v); err != nil {
		return fmt.Errorf("%w: body: %v", ports.ErrInvalidArgument, err)
	}
	return nil
}

// Options configure a Host.
type Options struct {
	// Owner is the engine's instance id, the owner of its sessions.
	Owner string
	// Connect opens a new accepting connection; it is called on every Serve.
	// Its closed handler hears only of a close the host did not make: the
	// host replaces it before it closes or drains the connection itself.
	Connect func() (*nats.Conn, error)
	// Replies carries every reply; it must outlive the accepting connection.
	Replies *nats.Conn
	// MaxConcurrent bounds the calls handled at once; 0 means
	// DefaultMaxConcurrent.
	MaxConcurrent int
	// MaxQueued bounds the calls that wait for one of those slots; a call
	// beyond it is answered 503 at once. 0 means DefaultMaxQueued.
	MaxQueued int
	// MaxQueuedPerCaller bounds the places in that queue one caller (see
	// Call.Who) may hold. 0 means a quarter of
	// MaxQueued. A freed slot goes to the callers with calls waiting in
	// turn, and a caller with fewer places than another takes one of its
	// when the queue is full, so a caller that floods the engine neither
	// keeps the others' calls out nor runs its whole share before them.
	MaxQueuedPerCaller int
	// Admit is asked before each call: whether the engine may serve now,
	// and the fencing token of the term it serves under, which the call's
	// context carries to the stores (ports.WithFencingToken). Not
	// admitted answers 503. nil: always, with no token.
	Admit func() (token uint64, ok bool)
	// CallerSecret, when set, requires every call to carry a valid token.
	CallerSecret []byte
	// Overflow, when set, parks replies too large for one message and
	// takes uploaded requests; it has the same Owner.
	Overflow *OverflowHost
	Logger   *slog.Logger
	// Version is reported in the micro services' info.
	Version string
	// OnCall, when set, learns how each call ended: its service and
	// operation, the status code (200 for success) and how long it took.
	OnCall func(service, operation string, code int, took time.Duration)
}

// Host serves a set of kernel services for one engine instance.
type Host struct {
	opts     Options
	services []Service
	slots    admission // the running slots and the calls waiting for one
	workers  *workers  // the goroutines admitted calls run on
	calls    counter

	mu     sync.Mutex
	accept *nats.Conn
	micros []micro.Service
	ctx    context.Context // ends the calls of the current serving period
	cancel context.CancelFunc

	// terms caches the contexts of the term admitted last. A call admitted
	// under an older token or period may store its own over a newer one;
	// each call runs under the value admit gave it, never under whatever
	// the cache holds later, so which store wins matters only to the cost.
	terms atomic.Pointer[termContexts]
}

// The bounds of a host's calls by default.
const (
	// DefaultMaxConcurrent is how many calls a host runs at once.
	DefaultMaxConcurrent = 64
	// DefaultMaxQueued is how many calls wait for a slot.
	DefaultMaxQueued = 256
)

// NewHost checks the services and returns a host that does not serve yet.
func NewHost(opts Options, services ...Service) (*Host, error) {
	if opts.Connect == nil || opts.Replies == nil {
		return nil, errors.New("natsapi: a host needs Connect and Replies")
	}
	if opts.Overflow != nil {
		if opts.Overflow.t.owner != opts.Owner {
			return nil, fmt.Errorf("natsapi: the overflow host belongs to %q, the host to %q", opts.Overflow.t.owner, opts.Owner)
		}
		services = append(slices.Clone(services), opts.Overflow.service())
	}
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = DefaultMaxConcurrent
	}
	if opts.MaxQueued <= 0 {
		opts.MaxQueued = DefaultMaxQueued
	}
	if opts.MaxQueuedPerCaller <= 0 {
		opts.MaxQueuedPerCaller = max(1, opts.MaxQueued/4)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Version == "" {
		opts.Version = "1.0.0"
	}
	if opts.Admit == nil {
		opts.Admit = func() (uint64, bool) { return 0, true }
	}
	h := &Host{
		opts:     opts,
		services: services,
		slots: admission{
			most: opts.MaxConcurrent, mostWaiting: opts.MaxQueued, mostPerCaller: opts.MaxQueuedPerCaller,
			lines: map[string]*line{},
		},
	}
	h.workers = newWorkers(h.freed)
	return h, nil
}

// Serve opens the accepting connection and subscribes every endpoint. It
// does nothing when the host already serves.
func (h *Host) Serve() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.accept != nil {
		return nil
	}
	nc, err := h.opts.Connect()
	if err != nil {
		return fmt.Errorf("serve kernel services: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	// The calls of this period still waiting when it ends are answered at
	// once: a slot may not free soon, as a running call need not heed its
	// context.
	context.AfterFunc(ctx, func() {
		for _, r := range h.slots.leave(ctx) {
			r.finish(nil, fmt.Errorf("%w: the engine stopped before the call ran", wire.ErrUnavailable))
		}
	})
	var micros []micro.Service
	fail := func(err error) error {
		cancel()
		nc.SetClosedHandler(nil) // the host closes it: no one else need hear of it
		nc.Close()
		return err
	}
	for _, s := range h.services {
		svc, err := micro.AddService(nc, micro.Config{
			Name:        s.Name,
			Version:     h.opts.Version,
			Description: s.Description,
			QueueGroup:  wire.QueueGroup(s.Name),
			Metadata:    map[string]string{"owner": h.opts.Owner},
		})
		if err != nil {
			return fail(fmt.Errorf("serve %s: %w", s.Name, err))
		}
		micros = append(micros, svc)
		for _, ep := range s.Endpoints {
			subject := wire.Subject(s.Name, ep.Name)
			if s.Prefix != "" {
				subject = s.Prefix + "." + ep.Name
			}
			// micro names take no dots, operations may (transfer.open).
			name := strings.ReplaceAll(ep.Name, ".", "_")
			err := svc.AddEndpoint(name, h.dispatch(ctx, s.Name, ep), micro.WithEndpointSubject(subject))
			if err != nil {
				return fail(fmt.Errorf("serve %s.%s: %w", s.Name, ep.Name, err))
			}
		}
	}
	// The subscriptions are at the broker once a round trip has passed.
	if err := nc.Flush(); err != nil {
		return fail(fmt.Errorf("serve kernel services: %w", err))
	}
	h.accept, h.micros, h.ctx, h.cancel = nc, micros, ctx, cancel
	return nil
}

// Serving reports whether the host takes calls.
func (h *Host) Serving() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.accept != nil
}

// InFlight is how many received calls are not answered yet.
func (h *Host) InFlight() int { return h.calls.value() }

// dispatch counts a call the moment it arrives, checks its token and
// admits it, all on the subscription's goroutine, so a flood of unsigned
// or surplus calls costs no goroutine each. An admitted call runs off the
// subscription's goroutine, so a slow call never holds up the others: at
// once on a kept worker when a slot is free, else later, in its caller's
// turn (admission), once it has waited in a bounded queue, which holds no
// goroutine; beyond the queue it is answered 503 at once. At most
// MaxConcurrent goroutines run calls, whatever arrives. A call the
// endpoint can answer at once (Quick) is answered on the subscription's
// goroutine, as a plain NATS responder would: no worker, and its reply
// leaves with the others of the batch the subscription is reading.
func (h *Host) dispatch(ctx context.Context, service string, ep Endpoint) micro.HandlerFunc {
	return func(req micro.Request) {
		if misdirected(h.opts.Logger, req.Subject(), req.Reply()) {
			return
		}
		h.calls.add()
		r := &received{
			Call:    Call{Subject: req.Subject(), Data: req.Data(), Header: nats.Header(req.Headers()), reply: req.Reply()},
			h:       h,
			ctx:     ctx,
			service: service,
			ep:      ep,
			start:   time.Now(),
		}
		call := &r.Call
		if err := h.identify(call); err != nil {
			r.finish(nil, err)
			return
		}
		// An uploaded request is taken as its call arrives: held by the
		// call from then on, it cannot expire while the call waits for a
		// slot. The call's end frees its bytes.
		release, err := h.uploaded(call)
		if err != nil {
			r.finish(nil, err)
			return
		}
		r.release = release
		if call.Header.Get(wire.TermHeader) != "" {
			// A call of an ended term, or of no term at all, is refused
			// before it takes a place in the queue, where it would wait
			// for a slot only to be refused then.
			if t, err := h.admit(ctx); err == nil {
				if err := ofTerm(call, t.token); err != nil {
					r.finish(nil, err)
					return
				}
			}
		}
		if ep.Quick != nil {
			if data, ok, err := h.quick(ctx, ep.Quick, call); ok {
				r.finish(data, err)
				return
			}
		}
		run, out, outErr, err := h.slots.admit(r)
		if out != nil {
			out.finish(nil, outErr)
		}
		switch {
		case err != nil:
			r.finish(nil, err)
		case run:
			// The worker gives the slot back once the call has ended.
			h.workers.run(r)
		}
	}
}

// freed takes the slot of a call that has ended: the next waiting call
// runs in it, on the worker that gives it back, or it is free.
func (h *Host) freed() {
	if next := h.slots.next(); next != nil {
		h.workers.run(next)
	}
}

// received is a call from its arrival to its answer: the call, where it
// came in and when. One allocation holds all a call needs on its way, and
// a worker runs it as it is.
type received struct {
	Call
	h       *Host
	ctx     context.Context // the serving period's
	service string
	ep      Endpoint
	start   time.Time
	release func() // frees the call's uploaded request; nil without one
}

// run handles the call and answers it.
func (r *received) run() { r.finish(r.h.handle(r.ctx, r.ep.Handler, &r.Call, r.start)) }

// finish answers the call, reports how it ended and counts it out.
func (r *received) finish(data []byte, err error) {
	defer r.h.calls.done()
	if r.release != nil {
		// The request's bytes are done with before a large answer is
		// parked, so the two never count at once against the caller's
		// share, as they did not when the call took its upload itself.
		r.release()
		r.release, r.Data = nil, nil
	}
	r.h.reply(r.reply, &r.Call, data, err)
	if r.h.opts.OnCall != nil {
		code := 200
		if err != nil {
			code = wire.CodeOf(err)
		}
		r.h.opts.OnCall(r.service, r.ep.Name, code, time.Since(r.start))
	}
}

// identify checks the call's token, when callers sign, and names its
// caller, the token's subject.
func (h *Host) identify(call *Call) error {
	if len(h.opts.CallerSecret) == 0 {
		return nil
	}
	caller, err := callerauth.Verify(h.opts.CallerSecret, call.Header.Get(wire.AuthHeader))
	if err != nil {
		return fmt.Errorf("%w: %w", wire.ErrUnauthorized, err)
	}
	call.Caller = caller
	return nil
}

// connectionOf names the connection a reply subject leads to: a NATS
// client's inboxes share a prefix per connection (_INBOX.<random>.<n>).
// A reply with no such prefix (_INBOX.<id>, the old request style) names
// no connection: all such callers are "connection _INBOX", one share (one
// per name when callers sign). The account is the only boundary, and a
// caller who wants to may pose as many connections and sign as many
// names; the share then bounds the careless.
func connectionOf(reply string) string {
	if i := strings.LastIndexByte(reply, '.'); i > 0 {
		return "connection " + reply[:i]
	}
	return "connection " + reply
}

// admit is what a call the engine may run now runs under: the serving
// period's context with its term's fencing token, which reaches the stores.
// Or it is the reason the call may not run.
func (h *Host) admit(period context.Context) (*termContexts, error) {
	if period.Err() != nil {
		return nil, fmt.Errorf("%w: the engine stopped before the call ran", wire.ErrUnavailable)
	}
	token, ok := h.opts.Admit()
	if !ok {
		return nil, fmt.Errorf("%w: the engine does not hold the lease", wire.ErrUnavailable)
	}
	t := h.terms.Load()
	if t == nil || t.period != period || t.token != token {
		t = newTermContexts(period, token, h.replyLimits())
		h.terms.Store(t)
	}
	return t, nil
}

// termContexts are the contexts the calls of one serving period run under
// while one fencing token holds: with the token alone (quick answers), and
// with the token and each reply limit a call may have (handlers). A
// context.WithValue costs two allocations; made once a term, not once a
// call, these cost none.
type termContexts struct {
	period context.Context
	token  uint64
	fenced context.Context
	limits [2]limited
}

// limited is a term's context with one reply limit.
type limited struct {
	most int
	ctx  context.Context
}

func newTermContexts(period context.Context, token uint64, limits [2]int) *termContexts {
	t := &termContexts{period: period, token: token, fenced: period}
	if token != 0 {
		t.fenced = ports.WithFencingToken(period, token)
	}
	for i, most := range limits {
		t.limits[i] = limited{most: most, ctx: context.WithValue(t.fenced, replyLimitKey{}, most)}
	}
	return t
}

// limitedTo is the context of a call whose answer may have most bytes, and
// whether t had it made already.
func (t *termContexts) limitedTo(most int) (context.Context, bool) {
	for _, l := range t.limits {
		if l.most == most {
			return l.ctx, true
		}
	}
	return context.WithValue(t.fenced, replyLimitKey{}, most), false
}

func (h *Host) handle(period context.Context, handle HandlerFunc, call *Call, arrived time.Time) ([]byte, error) {
	t, err := h.admit(period)
	if err != nil {
		return nil, err
	}
	if err := ofTerm(call, t.token); err != nil {
		return nil, err
	}
	most := h.replyLimit(call)
	ctx, made := t.limitedTo(most)
	if !made {
		// The broker's max_payload changed on a reconnect: the term's
		// contexts are made again for the limits it gives now.
		t = newTermContexts(period, t.token, h.replyLimits())
		h.terms.Store(t)
		ctx, _ = t.limitedTo(most)
	}
	if by, ok := answerBy(call, arrived); ok {
		ctx = ports.WithAnswerBy(ctx, by)
	}
	data, err := unpanicked(h.opts.Logger, call.Subject, func() ([]byte, error) { return handle(ctx, call) })
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("%w: the engine stopped the call while it ran: %w", wire.ErrInterrupted, err)
	}
	return data, err
}

// answerRoom is the time an answer is given to reach its caller before
// the caller stops waiting: a store that waits on a lock for a call
// (ports.AnswerBy) stops that long before, or a tenth of the caller's wait
// before when that is longer, and answers that it did nothing. A caller
// that waits less than twice answerRoom leaves half its wait for the lock,
// so that a lock held a moment does not fail its writes at once.
const answerRoom = 250 * time.Millisecond

// answerBy is the moment by which the answer to call, which arrived then,
// must be sent, from how long its caller said it would wait (WaitHeader),
// if it said so in a form that can be read.
func answerBy(call *Call, arrived time.Time) (time.Time, bool) {
	ms, err := strconv.ParseInt(call.Header.Get(wire.WaitHeader), 10, 64)
	if err != nil || ms < 0 || ms > math.MaxInt64/int64(time.Millisecond) {
		return time.Time{}, false
	}
	wait := time.Duration(ms) * time.Millisecond
	return arrived.Add(wait - max(wait/10, min(answerRoom, wait/2))), true
}

// unpanicked runs f, the work of the call what names, and turns a panic in it
// into the call's failure (500), logged with its stack. Left to unwind, a
// panic in an adapter or an endpoint ends the process at once, holding the
// lease: no release, no drain of the calls received, and no engine serves
// until the lease runs out. Other calls go on as before.
func unpanicked(log *slog.Logger, what string, f func() ([]byte, error)) (data []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("a call panicked", "call", what, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			data, err = nil, errPanicked
		}
	}()
	return f()
}

// errPanicked is a call whose work panicked; its caller is told no more.
var errPanicked = errors.New("the engine failed the call; its log has the cause")

// ofTerm refuses a call made under a serving term other than token, the
// one this engine serves under (wire.TermHeader). A module's job whose
// engine was fenced while it ran, sent late, would otherwise run here as
// a call of the newer term, and no store could tell it from this term's
// own. A call of a newer term than this engine's was made by the engine
// that took the lease over: this one still admits calls only because it
// has not yet seen its own fence, and a call it ran would be a write of
// the old term beside the new engine's (an unfenced store, such as S3,
// would take it). Refused, 503, the call goes again to the engine of its
// term. A call of no term, or of this term, runs.
func ofTerm(call *Call, token uint64) error {
	v := call.Header.Get(wire.TermHeader)
	if v == "" {
		return nil
	}
	term, err := strconv.ParseUint(v, 10, 64)
	if err != nil || term == 0 {
		return fmt.Errorf("%w: header %s %.40q is not a term (a decimal number above 0)", ports.ErrInvalidArgument, wire.TermHeader, v)
	}
	switch {
	case term < token:
		return fmt.Errorf("%w: the call was made under the lease's term %d, which has ended; this engine serves under term %d and did not run it",
			wire.ErrUnavailable, term, token)
	case term > token && token != 0:
		return fmt.Errorf("%w: the call was made under the lease's term %d, newer than this engine's term %d, which has ended; it did not run it",
			wire.ErrUnavailable, term, token)
	}
	return nil
}

// quick tries the endpoint's quick answer, under the same admission as
// handle. Anything that needs more (an uploaded request, a call the lease
// does not admit, a reply too large for one message) goes the usual way.
func (h *Host) quick(period context.Context, quick QuickFunc, call *Call) ([]byte, bool, error) {
	if call.Header.Get(wire.OverflowRequestHeader) != "" {
		return nil, false, nil
	}
	t, err := h.admit(period)
	if err != nil || ofTerm(call, t.token) != nil {
		return nil, false, nil
	}
	var ok bool
	data, err := unpanicked(h.opts.Logger, call.Subject, func() (data []byte, err error) {
		data, ok, err = quick(t.fenced, call)
		return data, err
	})
	if err == errPanicked {
		return nil, true, err
	}
	if !ok || len(data) > h.messageMost() {
		return nil, false, nil
	}
	return data, true, err
}

func (h *Host) reply(subject string, call *Call, data []byte, err error) {
	if subject == "" {
		return
	}
	var header nats.Header
	if err == nil {
		header, data, err = h.parkIfLarge(call, data)
	}
	respond(h.opts.Replies, h.opts.Logger, call.Subject, subject, header, data, err)
}

// StopAccepting ends every queue subscription at the broker. It drains the
// accepting connection: the broker stops routing to it, the calls it had
// delivered are dispatched, and the connection closes. When it returns
// every call this host will ever get is counted.
func (h *Host) StopAccepting(ctx context.Context) error {
	h.mu.Lock()
	nc, micros := h.accept, h.micros
	h.accept, h.micros = nil, nil
	h.mu.Unlock()
	if nc == nil {
		return nil
	}
	err := drain(ctx, nc)
	for _, svc := range micros {
		_ = svc.Stop() // its connection is closed; this only forgets it
	}
	if err != nil {
		return fmt.Errorf("stop accepting calls: %w", err)
	}
	return nil
}

// drain ends nc's subscriptions at the broker, lets the messages it had
// delivered reach their handlers, and closes it; at ctx's end it closes it
// at once.
func drain(ctx context.Context, nc *nats.Conn) error { return startDrain(nc)(ctx) }

// startDrain begins drain without waiting for it: the connection tells the
// broker its subscriptions are gone as soon as it can. finish waits for the
// drain to end, and at ctx's end closes the connection at once.
func startDrain(nc *nats.Conn) (finish func(ctx context.Context) error) {
	if nc.IsClosed() {
		// Closed for good on its own (its reconnects ran out): its
		// subscriptions are gone with it, and there is nothing to drain.
		return func(context.Context) error { return nil }
	}
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	if err := nc.Drain(); err != nil {
		nc.Close()
		return func(context.Context) error { return err }
	}
	return func(ctx context.Context) error {
		select {
		case <-closed:
			return nil
		case <-ctx.Done():
			nc.Close()
			return ctx.Err()
		}
	}
}

// fenceDrain bounds how long Stop waits for the broker to confirm that the
// accepting connection's subscriptions are gone, and a session host that
// its owner subscription is.
const fenceDrain = 2 * time.Second

// StopLimit is the longest a host's Stop takes, and the wait its Fence
// returns: each waits at most fenceDrain for the broker, and for the
// closes of sessions whose calls still run.
const StopLimit = fenceDrain

// Wait returns once every received call is answered, or ctx ends.
func (h *Host) Wait(ctx context.Context) error { return h.calls.wait(ctx) }

// Stop cancels the calls still running (they answer 500, interrupted) and
// ends the accepting connection if it is open. The calls it had delivered
// but not started meet the cancelled context and answer 503, so their
// callers send them again; and its subscriptions are ended at the broker
// before it closes, so no new call is routed to a connection about to
// vanish, where its caller would only time out.
func (h *Host) Stop() { h.Fence()() }

// Fence stops serving at once, as a holder that may have lost its lease
// must: running calls are cancelled, and the accepting connection starts
// to drain, which ends its subscriptions at the broker. It waits on
// nothing. The wait it returns waits for the drain, within fenceDrain: a
// fenced engine is often cut off from its broker, and what it still runs
// must not wait that out first. Serve starts again, also before the drain
// ends.
func (h *Host) Fence() (wait func()) {
	h.mu.Lock()
	nc, micros, cancel := h.accept, h.micros, h.cancel
	h.accept, h.micros = nil, nil
	h.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	finish := func(context.Context) error { return nil }
	if nc != nil {
		finish = startDrain(nc)
	}
	return func() {
		ctx, done := context.WithTimeout(context.Background(), fenceDrain)
		_ = finish(ctx)
		done()
		for _, svc := range micros {
			_ = svc.Stop()
		}
	}
}

// counter counts calls in flight and says when there are none. The
// channel a waiter waits on is made by the first waiter, not by every call
// that finds none in flight: a quick answer counts itself in and out alone.
type counter struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // made by a waiter while n > 0, closed when n next reaches 0
}

func (c *counter) add() {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
}

func (c *counter) done() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n--
	if c.n == 0 && c.zero != nil {
		close(c.zero)
		c.zero = nil
	}
}

func (c *counter) value() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *counter) wait(ctx context.Context) error {
	c.mu.Lock()
	if c.n == 0 {
		c.mu.Unlock()
		return nil
	}
	if c.zero == nil {
		c.zero = make(chan struct{})
	}
	zero := c.zero
	c.mu.Unlock()
	select {
	case <-zero:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
