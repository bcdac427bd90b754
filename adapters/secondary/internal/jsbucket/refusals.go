package jsbucket

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"

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
// the server refuses (natsconn). While any request of the process listens
// on a connection, the connection's handler is one that hands each error
// to the owner's handler, then to the listeners, and the last listener to
// go puts the owner's handler back. Nothing else changes a connection's
// handler once it is open: the engine sets its own when it connects.

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

// listened holds the connections some request listens on.
var listened = struct {
	sync.Mutex
	conns map[*nats.Conn]*listeners
}{conns: map[*nats.Conn]*listeners{}}

// listeners are the requests that listen on one connection.
type listeners struct {
	// own is the connection's handler before the first of them came.
	own  nats.ErrHandler
	next int
	hear map[int]*listener
	// inPlay holds, by subject, the publishes of writes whose fate is
	// not known. The server's refusal names the subject only, so a
	// refusal is a write's own only when every publish in play on its
	// subject is then known refused.
	inPlay map[string]*ledger
	// unsure: more subjects were in play than maxInPlay, and no refusal
	// of a write is taken as that write's own any more, so that the
	// ledgers do not grow without end.
	unsure bool
}

// ledger counts the publishes to one subject whose fate is not known:
// each is refused by the server, which says so to the connection, or
// taken, and then answered by the stream unless its answer is lost. A
// write that ended with no answer and no refusal of its own leaves its
// publishes in play, their refusal perhaps still on its way.
type ledger struct {
	// pubs are in play; refused of them are known refused, which ones
	// not known. When they are as many, all are refused.
	pubs, refused int
}

// maxInPlay bounds the subjects a connection keeps in play.
const maxInPlay = 4096

// listener is one request listening for refusals: a read, cancelled by
// the refusal of any subject mine matches, or a write of pubs publishes
// to the subject write, cancelled only when its refusal is certain.
type listener struct {
	mine    func(subject string) bool
	write   string
	pubs    int
	cancel  context.CancelCauseFunc
	settled bool
}

// listen registers a listener on nc, and puts a write's publishes in
// play.
func listen(nc *nats.Conn, lr *listener) (l *listeners, id int) {
	listened.Lock()
	defer listened.Unlock()
	l = listened.conns[nc]
	if l == nil {
		l = &listeners{own: nc.ErrorHandler(), hear: map[int]*listener{}, inPlay: map[string]*ledger{}}
		listened.conns[nc] = l
		nc.SetErrorHandler(l.handle)
	}
	id = l.next
	l.next++
	l.hear[id] = lr
	if lr.write != "" && !l.unsure {
		led := l.inPlay[lr.write]
		if led == nil {
			if len(l.inPlay) >= maxInPlay {
				l.unsure = true
				clear(l.inPlay)
				return l, id
			}
			led = &ledger{}
			l.inPlay[lr.write] = led
		}
		led.pubs += lr.pubs
	}
	return l, id
}

// stop ends the listener id on nc. Of a write, answered publishes leave
// play: those the stream answered were not refused. The last listener to
// go, with nothing left in play, puts the owner's handler back.
func (l *listeners) stop(nc *nats.Conn, id int, answered int) {
	listened.Lock()
	defer listened.Unlock()
	lr := l.hear[id]
	delete(l.hear, id)
	if led := l.inPlay[lr.write]; led != nil && !lr.settled && answered > 0 {
		led.pubs -= answered
		led.refused = min(led.refused, led.pubs)
		l.settle(lr.write, led)
	}
	if len(l.hear) == 0 && len(l.inPlay) == 0 && !l.unsure && listened.conns[nc] == l {
		delete(listened.conns, nc)
		nc.SetErrorHandler(l.own)
	}
}

// settle tells the writes to subject that each of its publishes in play
// was refused, when as many refusals were heard, and ends its ledger.
func (l *listeners) settle(subject string, led *ledger) {
	if led.pubs > 0 && led.refused < led.pubs {
		return
	}
	if led.pubs > 0 {
		for _, lr := range l.hear {
			if lr.write == subject {
				lr.settled = true
				lr.cancel(refusal(subject))
			}
		}
	}
	delete(l.inPlay, subject)
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
	listened.Lock()
	defer listened.Unlock()
	for _, lr := range l.hear {
		if lr.write == "" && lr.mine(subject) {
			lr.cancel(refusal(subject))
		}
	}
	if led := l.inPlay[subject]; led != nil && led.refused < led.pubs {
		led.refused++
		l.settle(subject, led)
	}
}

// untilRefused runs request, a read, whose context ends as soon as the
// server refuses nc's user a publish to a subject that mine matches; it
// then fails with that refusal, which wraps ErrPermission and names the
// subject. Otherwise it returns what request returned. A read has no
// outcome to get wrong: another request's refusal of the same subject
// fails it too.
func untilRefused(ctx context.Context, nc *nats.Conn, mine func(subject string) bool, request func(ctx context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	l, id := listen(nc, &listener{mine: mine, cancel: cancel})
	err := request(ctx)
	l.stop(nc, id, 0)
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
func untilWriteRefused(ctx context.Context, nc *nats.Conn, subject string, batch bool, request func(ctx context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	pubs := 1
	if batch {
		pubs = 2
	}
	l, id := listen(nc, &listener{write: subject, pubs: pubs, cancel: cancel})
	err := request(ctx)
	refused := err != nil && errors.Is(context.Cause(ctx), ErrPermission)
	answered := 0
	switch {
	case err == nil:
		answered = pubs
	case refused:
	case wasAnswered(err) || unsent(err):
		answered = 1
	}
	l.stop(nc, id, answered)
	if refused {
		return context.Cause(ctx)
	}
	return err
}

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
