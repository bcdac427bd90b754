package natsapi

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/internal/callerauth"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// sessionTable is what the transfer and overflow hosts share: sessions
// owned by one engine instance, reached on its owner subject
// (<prefix>.<owner>.<operation>, no queue group), bound to the caller that
// opened them, closed when idle, bounded in number.
type sessionTable struct {
	kind    string // what a session is called in errors: "transfer"
	owner   string
	subject string // the owner wildcard subject
	nc      *nats.Conn
	secret  []byte // the caller secret; nil when callers do not sign
	idle    time.Duration
	max     int
	maxWho  int                  // the most sessions one caller (see Call.Who) holds
	ops     map[string]sessionOp // every operation but close, which every table has
	logger  *slog.Logger
	sem     chan struct{} // bounds the session calls handled at once
	// inHand bounds the calls one session has in hand at once, close
	// aside: a caller that sends more to its own session than it may have
	// answered pending is refused, not given more of sem.
	inHand int32
	// admit is asked before every session call, as the Host asks before
	// every call: a session outlives the moment its engine may serve.
	admit func() (token uint64, ok bool)
	// terms: a session runs under the term of the lease it was opened
	// under, whose fencing token its context carries to the stores; a call
	// that finds the engine under another term closes it.
	terms bool

	mu       sync.Mutex
	sub      *nats.Subscription
	stopped  bool
	sessions map[string]*session
	// fenced are the sessions the last fence closed, by id: a call
	// that names one learns that the engine closed it, not that it is
	// unknown. It keeps only who may name each, never what it held, and
	// at most max entries (the sessions open at once): the next fence
	// that closes any replaces them all.
	fenced map[string]fencedSession
	byWho  map[string]int
	open   counter
}

// fencedSession is what the table remembers of a session a fence closed:
// enough to know its caller names it.
type fencedSession struct{ secret, caller string }

// session is one open session. Its calls run one at a time, under mu.
type session struct {
	id, secret, caller string
	who                string        // whose share the session takes
	idle               time.Duration // closes it after this long without a call
	token              uint64        // the fencing token of the term it was opened under; 0: none
	// ctx ends when the session closes: whatever works for it stops. It
	// carries token to the stores (ports.WithFencingToken).
	ctx    context.Context
	cancel context.CancelFunc

	inHand atomic.Int32 // calls received and not yet answered, close aside
	// closing is set by the first close call that found the lock held:
	// that close finishes on a goroutine of its own (closeCall).
	closing atomic.Bool

	mu     sync.Mutex
	last   time.Time
	timer  *time.Timer
	closed bool
	state  sessionState
}

// sessionOp is one operation on an open session, run under its lock. It
// answers a body and the headers that go with it.
type sessionOp func(s *session, call *sessionCall) (nats.Header, []byte, error)

// sessionCall is a session message: its chunk number (-1 when it has
// none) and its body.
type sessionCall struct {
	Seq  int64
	Data []byte
}

// seq is the chunk number an operation needs.
func (c *sessionCall) seq() (int64, error) {
	if c.Seq < 0 {
		return 0, fmt.Errorf("%w: header %s is missing", ports.ErrInvalidArgument, wire.SeqHeader)
	}
	return c.Seq, nil
}

// sessionState is what a session holds; release frees it, once, under the
// session's lock, after the session's context has ended.
type sessionState interface{ release() }

// committing is a session state whose work may have taken effect by the
// time its session closes (an upload whose commit has begun), so a call
// that closes it cannot say that nothing was done.
type committing interface{ committing() bool }

func newSessionTable(kind, prefix, owner string, nc *nats.Conn, secret []byte, idle time.Duration, maxOpen, maxPerCaller int, logger *slog.Logger) *sessionTable {
	return &sessionTable{
		kind:     kind,
		owner:    owner,
		subject:  prefix + "." + owner + ".*",
		nc:       nc,
		secret:   secret,
		idle:     idle,
		max:      maxOpen,
		maxWho:   maxPerCaller,
		ops:      map[string]sessionOp{},
		logger:   logger,
		sem:      make(chan struct{}, 64),
		inHand:   4,
		sessions: map[string]*session{},
		byWho:    map[string]int{},
		admit:    func() (uint64, bool) { return 0, true },
	}
}

// serve subscribes the owner subject, without a queue group: only this
// engine instance gets its sessions' messages.
func (t *sessionTable) serve() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = false
	if t.sub != nil {
		return nil
	}
	sub, err := t.nc.Subscribe(t.subject, t.deliver)
	if err != nil {
		return fmt.Errorf("serve %ss: %w", t.kind, err)
	}
	if err := t.nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("serve %ss: %w", t.kind, err)
	}
	t.sub = sub
	return nil
}

func (t *sessionTable) deliver(msg *nats.Msg) {
	if misdirected(t.logger, msg.Subject, msg.Reply) {
		return
	}
	s := t.counted(msg)
	if s != nil && s.inHand.Add(1) > t.inHand {
		s.inHand.Add(-1)
		err := fmt.Errorf("%w: %s %q has %d calls in hand, the most it may", wire.ErrUnavailable, t.kind, s.id, t.inHand)
		respond(t.nc, t.logger, msg.Subject, msg.Reply, nil, nil, err)
		return
	}
	t.sem <- struct{}{}
	go func() {
		defer func() { <-t.sem }()
		var header nats.Header
		data, err := unpanicked(t.logger, msg.Subject, func() (data []byte, err error) {
			header, data, err = t.handle(msg)
			return data, err
		})
		if s != nil {
			s.inHand.Add(-1)
		}
		respond(t.nc, t.logger, msg.Subject, msg.Reply, header, data, err)
	}()
}

// counted is the open session a message names with its secret, whose
// calls in hand it counts; nil for a close, which always goes through, and
// for a session not open or a wrong secret, which handle answers at once
// with not found. So nobody without the secret spends a session's calls
// or learns it is open.
func (t *sessionTable) counted(msg *nats.Msg) *session {
	if strings.HasSuffix(msg.Subject, "."+wire.SessionClose) {
		return nil
	}
	return t.lookup(wire.SessionRef{ID: msg.Header.Get(wire.SessionHeader), Secret: msg.Header.Get(wire.SessionSecretHeader)})
}

// handle checks the caller and the headers that name the session, and
// runs the operation on it.
func (t *sessionTable) handle(msg *nats.Msg) (nats.Header, []byte, error) {
	op := msg.Subject[strings.LastIndexByte(msg.Subject, '.')+1:]
	f, ok := t.ops[op]
	if !ok && op != wire.SessionClose {
		return nil, nil, fmt.Errorf("%w: no %s operation %q", ports.ErrNotFound, t.kind, op)
	}
	var caller string
	if len(t.secret) > 0 {
		var err error
		if caller, err = callerauth.Verify(t.secret, msg.Header.Get(wire.AuthHeader)); err != nil {
			return nil, nil, fmt.Errorf("%w: %w", wire.ErrUnauthorized, err)
		}
	}
	ref := wire.SessionRef{ID: msg.Header.Get(wire.SessionHeader), Secret: msg.Header.Get(wire.SessionSecretHeader)}
	if ref.ID == "" {
		return nil, nil, fmt.Errorf("%w: header %s is missing", ports.ErrInvalidArgument, wire.SessionHeader)
	}
	// A close only frees what the session holds, so it goes through
	// whether or not the engine may serve.
	if op == wire.SessionClose {
		return t.closeCall(ref, caller)
	}
	token, ok := t.admit()
	if !ok {
		return nil, nil, fmt.Errorf("%w: the engine does not hold the lease", wire.ErrUnavailable)
	}
	call := &sessionCall{Seq: -1, Data: msg.Data}
	if v := msg.Header.Get(wire.SeqHeader); v != "" {
		// Only the plain decimal form: ParseInt also takes "+1", "-0"
		// and "01", which the protocol does not.
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || strconv.FormatInt(n, 10) != v {
			return nil, nil, fmt.Errorf("%w: header %s is %q, want 0 or more", ports.ErrInvalidArgument, wire.SeqHeader, v)
		}
		call.Seq = n
	}
	var header nats.Header
	data, err := t.use(ref, caller, func(s *session) ([]byte, error) {
		if t.terms && s.token != token {
			return nil, t.termEnded(s, token)
		}
		var (
			data []byte
			err  error
		)
		header, data, err = f(s, call)
		return data, err
	})
	return header, data, err
}

// termEnded closes a session opened under another term of the lease than
// the one the engine serves under now, whose lock the caller holds, and
// is the answer of the call that found it so. Its work carries the old
// term's token, which a store that fences refuses once the new term has
// written, so it is not let go on beside the new term's.
func (t *sessionTable) termEnded(s *session, now uint64) error {
	what := wire.ErrUnavailable
	if c, ok := s.state.(committing); ok && c.committing() {
		what = wire.ErrInterrupted
	}
	t.closeLocked(s)
	return fmt.Errorf("%w: %s %q was opened under the lease's term %d, and the engine serves under term %d now; it is closed",
		what, t.kind, s.id, s.token, now)
}

// add opens a session for caller, counted against who, that closes after
// idle without a call, under the term whose fencing token is token (0:
// none); or refuses when the engine stops or holds as many as it may, in
// all or for who. The caller of add sets the state.
func (t *sessionTable) add(token uint64, caller, who string, idle time.Duration) (*session, error) {
	s := &session{id: t.owner + ":" + randomHex(), secret: randomHex(), caller: caller, who: who, idle: idle, token: token, last: time.Now()}
	// The session's work runs after the call that opened it has been
	// answered, on a context of its own, which carries the term's token
	// as that call's did.
	base := context.Background()
	if token != 0 {
		base = ports.WithFencingToken(base, token)
	}
	s.ctx, s.cancel = context.WithCancel(base)
	// The timer is set under the session's lock, which its expiry takes.
	s.mu.Lock()
	defer s.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.stopped || t.sub == nil:
		s.cancel()
		return nil, fmt.Errorf("%w: this engine takes no new %ss", wire.ErrUnavailable, t.kind)
	case len(t.sessions) >= t.max:
		s.cancel()
		return nil, fmt.Errorf("%w: %d %ss are open, the most this engine holds; try again later", wire.ErrUnavailable, t.max, t.kind)
	case t.byWho[who] >= t.maxWho:
		s.cancel()
		return nil, fmt.Errorf("%w: %s holds %d %ss, the most one caller holds; try again later", wire.ErrUnavailable, who, t.maxWho, t.kind)
	}
	t.sessions[s.id] = s
	t.byWho[who]++
	t.open.add()
	s.timer = time.AfterFunc(idle, func() { t.expire(s) })
	return s, nil
}

// use runs f on the session ref names, if the caller opened it. Any
// mismatch is "not found", so nobody learns of another caller's sessions.
func (t *sessionTable) use(ref wire.SessionRef, caller string, f func(s *session) ([]byte, error)) ([]byte, error) {
	s, err := t.find(ref, caller)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("%w: %s %q", ports.ErrNotFound, t.kind, ref.ID)
	}
	defer func() { s.last = time.Now() }()
	return f(s)
}

// find is the open session ref names, if caller opened it and ref holds
// its secret; every other case is the same not found.
func (t *sessionTable) find(ref wire.SessionRef, caller string) (*session, error) {
	if s := t.lookup(ref); s != nil && s.caller == caller {
		return s, nil
	}
	return nil, fmt.Errorf("%w: %s %q", ports.ErrNotFound, t.kind, ref.ID)
}

// lookup is the open session ref names, if ref holds its secret; nil
// otherwise.
func (t *sessionTable) lookup(ref wire.SessionRef) *session {
	t.mu.Lock()
	s := t.sessions[ref.ID]
	t.mu.Unlock()
	if s == nil || subtle.ConstantTimeCompare([]byte(s.secret), []byte(ref.Secret)) != 1 {
		return nil
	}
	return s
}

// closeCall ends a session at its caller's request. It ends the session's
// context before it takes the session's lock, as close does, so a call
// that holds the lock waiting on the store (a write with the queue full)
// lets go of it, and the close takes effect at once. A call in a store
// that does not heed the cancel holds the lock for as long as the store
// takes: the close is answered at once all the same, and finishes on a
// goroutine of its own, one for the session however many closes come,
// when that call lets go. A close that waited for the lock held one of the
// slots of the calls the table does not count, and a flood of closes at
// such a session took them all, and with them the subscription: every
// caller's session calls stalled.
func (t *sessionTable) closeCall(ref wire.SessionRef, caller string) (nats.Header, []byte, error) {
	s, err := t.find(ref, caller)
	if err != nil {
		return nil, nil, err
	}
	s.cancel()
	switch {
	case s.mu.TryLock():
		t.closeLocked(s)
		s.mu.Unlock()
	case s.closing.CompareAndSwap(false, true):
		go t.close(s)
	}
	return nil, []byte("{}"), nil
}

// expire closes a session idle for the idle time. A call in progress holds
// the lock, and the time counts from its end.
func (t *sessionTable) expire(s *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if wait := s.idle - time.Since(s.last); wait > 0 {
		s.timer.Reset(wait)
		return
	}
	t.logger.Info("session expired", "kind", t.kind, "id", s.id, "who", s.who, "idle", s.idle)
	t.closeLocked(s)
}

// close ends a session from outside its calls: its context ends first, so
// a call waiting on it lets go of the lock.
func (t *sessionTable) close(s *session) {
	s.cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	t.closeLocked(s)
}

// closeLocked ends a session whose lock the caller holds.
func (t *sessionTable) closeLocked(s *session) {
	if s.closed {
		return
	}
	s.closed = true
	s.cancel()
	s.timer.Stop()
	if s.state != nil {
		t.release(s)
	}
	t.mu.Lock()
	delete(t.sessions, s.id)
	if t.byWho[s.who]--; t.byWho[s.who] <= 0 {
		delete(t.byWho, s.who)
	}
	t.mu.Unlock()
	t.open.done()
}

// release frees what s holds, which may call its store: a download
// closes the store's reader. A panic there is logged and the session
// closes all the same. Left to unwind, it ended the process when the
// session's idle time ran out, or when a fence or a stop closed it, on
// goroutines no call's recovery covers; and on a close call it left the
// session closed but counted, which held one of its caller's sessions for
// good, and made every drain wait out its deadline.
func (t *sessionTable) release(s *session) {
	defer func() {
		if p := recover(); p != nil {
			t.logger.Error("a session's release panicked", "kind", t.kind, "id", s.id,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	s.state.release()
}

// count is how many sessions are open.
func (t *sessionTable) count() int { return t.open.value() }

// wait returns once no session is open, or ctx ends.
func (t *sessionTable) wait(ctx context.Context) error { return t.open.wait(ctx) }

// stop closes every session and ends the owner subscription, so later
// calls find nobody and fail at once; it waits, within fenceDrain, for the
// broker to confirm.
func (t *sessionTable) stop() { t.fence()() }

// fence ends the owner subscription, so later calls find nobody, and closes
// every session at once: every session's context ends before any close
// takes a session's lock, so a call that holds one in a store that does
// not heed its context holds up no other session's cancellation. It waits
// on nothing: a session whose lock a call still holds closes on a
// goroutine of its own once the call lets go, and the confirm it returns
// waits, within fenceDrain, for those closes and for the broker, which a
// fenced engine may not reach. The engine fences on its serving loop, and
// stops the sessions before it releases the lease: a close that waited
// for a store that never returns held up both for good.
func (t *sessionTable) fence() (confirm func()) {
	t.mu.Lock()
	t.stopped = true
	sub := t.sub
	t.sub = nil
	open := make([]*session, 0, len(t.sessions))
	if len(t.sessions) > 0 {
		t.fenced = make(map[string]fencedSession, len(t.sessions))
	}
	for _, s := range t.sessions {
		open = append(open, s)
		t.fenced[s.id] = fencedSession{secret: s.secret, caller: s.caller}
	}
	t.mu.Unlock()
	if sub != nil {
		_ = sub.Unsubscribe() // queued for the broker; the flush below waits for it
	}
	for _, s := range open {
		s.cancel()
	}
	var late sync.WaitGroup
	for _, s := range open {
		if s.mu.TryLock() {
			t.closeLocked(s)
			s.mu.Unlock()
			continue
		}
		late.Go(func() { t.close(s) })
	}
	closed := make(chan struct{})
	go func() {
		late.Wait()
		close(closed)
	}()
	return func() {
		bound := time.NewTimer(fenceDrain)
		defer bound.Stop()
		if sub != nil {
			_ = t.nc.FlushTimeout(fenceDrain)
		}
		select {
		case <-closed:
		case <-bound.C:
		}
	}
}

// isStopped reports whether the table takes no new session: the engine
// fenced or stopped it, and has not served it again.
func (t *sessionTable) isStopped() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stopped || t.sub == nil
}

// closedByFence reports whether ref names, with its secret, a session of
// caller's the last fence closed.
func (t *sessionTable) closedByFence(ref wire.SessionRef, caller string) bool {
	t.mu.Lock()
	s, ok := t.fenced[ref.ID]
	t.mu.Unlock()
	return ok && s.caller == caller && subtle.ConstantTimeCompare([]byte(s.secret), []byte(ref.Secret)) == 1
}

// randomHex is 128 random bits in hex: an id part nobody can guess.
func randomHex() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// dropped counts the calls refused for a reply subject that is not an
// inbox; one in droppedLogEvery is logged, so a caller that sends them in
// a loop does not flood the log.
var dropped atomic.Int64

const droppedLogEvery = 1000

// misdirected reports whether a call's reply subject is one no engine
// answers on, and counts and drops it: the engine may publish where its
// callers may not, and an answer there would be a write the caller chose
// (into the lease key, say). Such a call is dropped as it arrives, before
// it runs. A call with no reply is not misdirected: nothing is answered.
func misdirected(logger *slog.Logger, what, reply string) bool {
	if reply == "" || wire.IsInbox(reply) {
		return false
	}
	if n := dropped.Add(1); n%droppedLogEvery == 1 {
		logger.Warn("a call's reply subject is not an inbox; dropped unanswered",
			"call", what, "reply", reply, "dropped_so_far", n)
	}
	return true
}

// respond publishes the answer to a call on what (its subject): data, or
// err as micro error headers.
func respond(nc *nats.Conn, logger *slog.Logger, what, subject string, header nats.Header, data []byte, err error) {
	if subject == "" {
		return
	}
	msg := nats.NewMsg(subject)
	for k, v := range header {
		msg.Header[k] = v
	}
	if err != nil {
		code := wire.CodeOf(err)
		msg.Header.Set(wire.ErrorCodeHeader, fmt.Sprint(code))
		msg.Header.Set(wire.ErrorHeader, errorText(publicMessage(logger, what, code, err), nc.MaxPayload()))
	} else {
		msg.Data = data
	}
	if perr := nc.PublishMsg(msg); perr != nil {
		logger.Warn("reply lost", "subject", subject, "err", perr)
	}
}

// maxErrorText is the most bytes of an error's text an answer carries.
const maxErrorText = 16 << 10

// errorText bounds the text of an error answer to maxErrorText, and to
// half of maxPayload, the most a message on the replying connection may
// hold. The text may quote the caller's own input, such as a secret's name
// or a field's, whose only bound is the request's size: quoted whole, twice
// perhaps, it could pass the max payload, the answer would not go out and
// the caller would wait out its timeout for an error it was due at once.
// A longer text is cut at a character and says how much was left out.
func errorText(s string, maxPayload int64) string {
	most := maxErrorText
	if maxPayload > 0 {
		most = min(most, int(maxPayload/2))
	}
	if len(s) <= most {
		return s
	}
	cut := most
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d bytes more)", s[:cut], len(s)-cut)
}

// publicMessage is what a caller learns of a failed call. The text of a
// 500, a 507 or a 503 the store answered (ports.ErrNotDone) comes from
// deep inside (a backend's error, a file of this host) and may name paths
// or internals, so the caller gets what failed and a reference to the log
// line that holds the rest. Other codes are about the caller's own input,
// or the engine's own state, and say which argument was wrong or why.
func publicMessage(logger *slog.Logger, what string, code int, err error) string {
	notDone := code == wire.CodeUnavailable && errors.Is(err, ports.ErrNotDone)
	if code != wire.CodeInternal && code != wire.CodeStorageFull && !notDone {
		return err.Error()
	}
	ref := randomHex()[:12]
	logger.Error("call failed", "subject", what, "ref", ref, "err", err)
	if code == wire.CodeStorageFull {
		return fmt.Sprintf("%v: the store has no room for %s and wrote nothing (log ref %s)", ports.ErrStorageFull, what, ref)
	}
	if notDone {
		return fmt.Sprintf("%v: the store did not do %s and changed nothing; send it again (log ref %s)", ports.ErrNotDone, what, ref)
	}
	if errors.Is(err, wire.ErrInterrupted) {
		return fmt.Sprintf("%v: the engine stopped %s while it ran; it may or may not have taken effect (log ref %s)", wire.ErrInterrupted, what, ref)
	}
	return fmt.Sprintf("the engine failed to answer %s (log ref %s)", what, ref)
}

// errSessionClosed is what a session's pending work sees when it closes.
var errSessionClosed = errors.New("the session was closed")
