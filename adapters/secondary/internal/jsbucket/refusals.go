package jsbucket

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"sync"
	"weak"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The server refuses a publish that the user's permissions deny by an
// error on the connection, and sends the publish nowhere: a request whose
// publish it refused gets no answer, and would wait out its whole time. So
// a request hears, while it runs, the refusals the server tells its
// connection (untilRefused), and fails as soon as one names a subject it
// publishes to. The refusal names the subject only: a write, which must
// not be told refused when it was stored, takes it for its own only when
// no other publish to the subject on the connection may be the one
// refused (untilWriteRefused).
//
// A connection has one error handler, its owner's: the engine's logs what
// the server refuses (natsconn). The first store of the process on a
// connection puts in its place one that hands each error to the owner's
// handler, then to the requests listening, and it stays the connection's
// handler for the connection's life: a request only joins and leaves the
// connection's list, under the connection's own lock. Nothing else
// changes a connection's handler once it is open: the engine sets its own
// when it connects.

// ErrPermission is a request the NATS server refused because the
// connection's user may not publish to its subject. No retry heals it.
var ErrPermission = errors.New("the NATS user's permissions do not allow it")

// violatedSubject reads the subject out of the server's "Permissions
// Violation for Publish to \"<subject>\"".
var violatedSubject = regexp.MustCompile(`(?i)publish to "([^"]+)"`)

// refusal is the error of a publish to subject that the server refused.
func refusal(subject string) error {
	return fmt.Errorf("the NATS server refused to let the engine's user publish to %s; add it to the user's publish permissions (docs/security.md): %w", subject, ErrPermission)
}

// conns holds the connections a store listens on, each until it is
// collected: the key is weak, and the connection's handler holds its
// listeners, not the other way round.
var conns = struct {
	sync.Mutex
	m map[weak.Pointer[nats.Conn]]*listeners
}{m: map[weak.Pointer[nats.Conn]]*listeners{}}

// refusalsOf returns nc's listeners, putting their handler on nc the
// first time.
func refusalsOf(nc *nats.Conn) *listeners {
	key := weak.Make(nc)
	conns.Lock()
	defer conns.Unlock()
	if l := conns.m[key]; l != nil {
		return l
	}
	l := &listeners{own: nc.ErrorHandler()}
	conns.m[key] = l
	nc.SetErrorHandler(l.handle)
	runtime.AddCleanup(nc, func(key weak.Pointer[nats.Conn]) {
		conns.Lock()
		defer conns.Unlock()
		delete(conns.m, key)
	}, key)
	return l
}

// listeners are the requests that listen on one connection.
type listeners struct {
	// own is the connection's handler before theirs.
	own nats.ErrHandler
	mu  sync.Mutex
	// head starts the list of those listening. A refusal, rare, reads
	// the whole list; a request only links itself in and out.
	head *listener
	// orphans counts, by subject, the publishes of writes that ended with
	// no answer and no refusal of their own, their refusal perhaps still
	// on its way; refused counts the refusals heard of a subject with
	// publishes in play, which ones not known. The server's refusal
	// names the subject only, so a refusal is a write's own only when
	// every publish in play on its subject is then known refused.
	orphans, refused map[string]int
	// unsure: more subjects were kept in play than maxInPlay, and no
	// refusal of a write is taken as that write's own any more, so that
	// the counts do not grow without end.
	unsure bool
}

// maxInPlay bounds the subjects a connection keeps in play.
const maxInPlay = 4096

// listener is one request listening for refusals: a read of subject, or
// of any subject mine matches, cancelled by its refusal, or a write of
// pubs publishes to subject, cancelled only when its refusal is certain.
type listener struct {
	prev, next *listener
	subject    string
	mine       func(subject string) bool
	write      bool
	pubs       int
	cancel     context.CancelCauseFunc
	settled    bool
}

// hears reports whether a read listening so is refused with subject.
func (lr *listener) hears(subject string) bool {
	if lr.mine != nil {
		return lr.mine(subject)
	}
	return lr.subject == subject
}

// listen links lr into the list.
func (l *listeners) listen(lr *listener) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lr.next = l.head
	if l.head != nil {
		l.head.prev = lr
	}
	l.head = lr
}

// stop links lr out of the list. Of a write, the publishes the stream
// answered leave play, as they were not refused; the others stay.
func (l *listeners) stop(lr *listener, answered int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lr.prev != nil {
		lr.prev.next = lr.next
	} else {
		l.head = lr.next
	}
	if lr.next != nil {
		lr.next.prev = lr.prev
	}
	if !lr.write || lr.settled || l.unsure {
		return
	}
	if left := lr.pubs - answered; left > 0 {
		if l.orphans == nil {
			l.orphans = map[string]int{}
		}
		if _, ok := l.orphans[lr.subject]; !ok && len(l.orphans) >= maxInPlay {
			l.unsure = true
			l.orphans, l.refused = nil, nil
			return
		}
		l.orphans[lr.subject] += left
	}
	if l.refused[lr.subject] > 0 {
		l.settle(lr.subject)
	}
}

// inPlay counts the publishes to subject whose fate is not known.
func (l *listeners) inPlay(subject string) int {
	n := l.orphans[subject]
	for lr := l.head; lr != nil; lr = lr.next {
		if lr.write && lr.subject == subject {
			n += lr.pubs
		}
	}
	return n
}

// settle tells the writes to subject that each of its publishes in play
// was refused, when as many refusals were heard, and ends its counts.
func (l *listeners) settle(subject string) {
	n := l.inPlay(subject)
	if n > 0 && l.refused[subject] < n {
		return
	}
	for lr := l.head; lr != nil; lr = lr.next {
		if lr.write && lr.subject == subject {
			lr.settled = true
			lr.cancel(refusal(subject))
		}
	}
	delete(l.orphans, subject)
	delete(l.refused, subject)
}

// handle is a listened connection's error handler.
func (l *listeners) handle(nc *nats.Conn, sub *nats.Subscription, err error) {
	if l.own != nil {
		l.own(nc, sub, err)
	}
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	m := violatedSubject.FindStringSubmatch(err.Error())
	if m == nil {
		return
	}
	subject := m[1]
	l.mu.Lock()
	defer l.mu.Unlock()
	for lr := l.head; lr != nil; lr = lr.next {
		if !lr.write && lr.hears(subject) {
			lr.cancel(refusal(subject))
		}
	}
	if l.unsure {
		return
	}
	if n := l.inPlay(subject); l.refused[subject] < n {
		if l.refused == nil {
			l.refused = map[string]int{}
		}
		l.refused[subject]++
		l.settle(subject)
	}
}

// untilRefused runs request, a read, whose context ends as soon as the
// server refuses the connection's user a publish to subject, or to a
// subject that mine matches when mine is not nil; it then fails with that
// refusal, which wraps ErrPermission and names the subject. Otherwise it
// returns what request returned. A read has no outcome to get wrong:
// another request's refusal of the same subject fails it too.
func (l *listeners) untilRefused(ctx context.Context, subject string, mine func(subject string) bool, request func(ctx context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lr := &listener{subject: subject, mine: mine, cancel: cancel}
	l.listen(lr)
	err := request(ctx)
	l.stop(lr, 0)
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, ErrPermission) {
		return cause
	}
	return err
}

// untilWriteRefused runs request, one sending of a write to subject, like
// untilRefused, but a refusal of subject is taken as the write's own only
// when it is certain: two writes to one key publish to one subject, and
// when the user's permissions change between them, the server's refusal
// of the second names the subject the first was stored on. A refusal
// that may be another's leaves the write waiting for its own answer,
// which a stored write gets, and it is the write's own once every other
// publish in play on the subject was answered. So no write is reported
// refused, or not done, for having heard another's refusal. batch: the
// sending is an atomic batch, two publishes, of which an answer to the
// commit that is no success does not tell the first's fate.
func (l *listeners) untilWriteRefused(ctx context.Context, subject string, batch bool, request func(ctx context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	pubs := 1
	if batch {
		pubs = 2
	}
	lr := &listener{subject: subject, write: true, pubs: pubs, cancel: cancel}
	l.listen(lr)
	err := request(ctx)
	refused := err != nil && errors.Is(context.Cause(ctx), ErrPermission)
	answered := 0
	switch {
	case err == nil:
		answered = pubs
	case refused:
	case errors.As(err, new(noneSent)):
		answered = pubs
	case wasAnswered(err) || unsent(err):
		answered = 1
	}
	l.stop(lr, answered)
	if refused {
		return context.Cause(ctx)
	}
	return err
}

// noneSent is the error of a sending the connection refused before any
// of its publishes went to the server (the first of a batch, for which
// unsent tells of the last only): none of them is refused.
type noneSent struct{ err error }

func (e noneSent) Error() string { return e.err.Error() }
func (e noneSent) Unwrap() error { return e.err }

// wasAnswered reports whether a sending that failed with err was answered
// by the stream, or by the server for want of one, so that the server
// took its publish (the last, of a batch) and refuses it no more.
func wasAnswered(err error) bool {
	return errors.As(err, new(*jetstream.APIError)) || errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

// unsent reports whether a sending that failed with err was refused by
// the connection before it went to the server: its publish, the last of
// a batch, was never refused by the server.
func unsent(err error) bool {
	return errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, nats.ErrReconnectBufExceeded) || errors.Is(err, nats.ErrConnectionClosed)
}
