package jsbucket

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"

	"github.com/nats-io/nats.go"
)

// The server refuses a publish that the user's permissions deny by an
// error on the connection, and sends the publish nowhere: a request whose
// publish it refused gets no answer, and would wait out its whole time. So
// a request hears, while it runs, the refusals the server tells its
// connection (untilRefused), and fails as soon as one names a subject it
// publishes to.
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
	hear map[int]func(subject string)
}

// onRefusal calls hear with the subject of each publish the server
// refuses to nc's user, from now until stop is called. hear runs on the
// connection's goroutine of callbacks, and must not block.
func onRefusal(nc *nats.Conn, hear func(subject string)) (stop func()) {
	listened.Lock()
	defer listened.Unlock()
	l := listened.conns[nc]
	if l == nil {
		l = &listeners{own: nc.ErrorHandler(), hear: map[int]func(string){}}
		listened.conns[nc] = l
		nc.SetErrorHandler(l.handle)
	}
	id := l.next
	l.next++
	l.hear[id] = hear
	return func() {
		listened.Lock()
		defer listened.Unlock()
		delete(l.hear, id)
		if len(l.hear) == 0 && listened.conns[nc] == l {
			delete(listened.conns, nc)
			nc.SetErrorHandler(l.own)
		}
	}
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
	listened.Lock()
	defer listened.Unlock()
	for _, hear := range l.hear {
		hear(m[1])
	}
}

// untilRefused runs request, whose context ends as soon as the server
// refuses nc's user a publish to a subject that mine matches; it then
// fails with that refusal, which wraps ErrPermission and names the
// subject. Otherwise it returns what request returned.
func untilRefused(ctx context.Context, nc *nats.Conn, mine func(subject string) bool, request func(ctx context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := onRefusal(nc, func(subject string) {
		if mine(subject) {
			cancel(refusal(subject))
		}
	})
	err := request(ctx)
	stop()
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, ErrPermission) {
		return cause
	}
	return err
}
