package pgdb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/abi-engine/engine/ports"
)

// Ceiling is the longest a store's statement waits for the server, from
// taking its connection to reading its answer, where its call's context
// sets no sooner deadline (ADR 0022). An engine's calls carry no deadline,
// and a server whose host still answers while the server itself has
// stopped (paused, stuck on its disk) would otherwise hold the call, and
// its connection, for as long as it stays stopped: the dialer's bound on a
// dead host (deadHost) never comes, since the host acknowledges every byte.
type Ceiling time.Duration

// DefaultCeiling bounds every statement of the stores: a minute, as a
// batch of keyvalue sets was already bounded, well past the 5 s a write
// waits for the fence row and any statement a healthy server runs for
// the stores.
const DefaultCeiling = Ceiling(time.Minute)

// readMargin is how long past the moment its caller's answer is due
// (ports.AnswerBy) a read still runs: an answer a moment late may yet
// reach a caller that left itself room, and one later helps nobody.
const readMargin = time.Second

// ErrUnanswered marks a statement the server had not answered when its
// ceiling, or for a read the moment its answer was due, came. It is not
// context.DeadlineExceeded: the caller's own deadline had not passed, and
// the failure is the server's.
var ErrUnanswered = errors.New("the server did not answer the statement in time")

// Read bounds ctx for a read: it ends at the sooner of ctx's own deadline,
// the ceiling, and the moment the caller's answer is due plus readMargin.
// A read cut short changes nothing, so nothing is lost by ending it once
// its answer can no longer be used. end cancels the bound and returns the
// read's error, marked ErrUnanswered when the bound cut it.
func (c Ceiling) Read(ctx context.Context) (_ context.Context, end func(error) error) {
	by := time.Now().Add(time.Duration(c))
	cause := fmt.Errorf("%w: a read still unanswered after %s", ErrUnanswered, time.Duration(c))
	if due, ok := ports.AnswerBy(ctx); ok && due.Add(readMargin).Before(by) {
		by = due.Add(readMargin)
		cause = fmt.Errorf("%w: a read still unanswered %s after its answer was due", ErrUnanswered, readMargin)
	}
	bctx, cancel := context.WithDeadlineCause(ctx, by, cause)
	return bctx, func(err error) error {
		defer cancel()
		if !wasCut(bctx, err) {
			return err
		}
		return cutError(context.Cause(bctx), err)
	}
}

// Write bounds ctx for a write at the sooner of its own deadline and the
// ceiling. The moment the caller's answer is due does not end it: a write
// cut short in flight is of unknown outcome, which a caller can do less
// with than a late answer, so only a server that stays silent for the
// whole ceiling cuts it. end cancels the bound and returns the write's
// error: when the bound cut it, marked ErrUnanswered, and not done
// (ports.ErrNotDone, NotDone) if it was never sent, such as when no
// connection came, or else of unknown outcome.
func (c Ceiling) Write(ctx context.Context) (_ context.Context, end func(error) error) {
	cause := fmt.Errorf("%w: a write still unanswered after %s", ErrUnanswered, time.Duration(c))
	bctx, cancel := context.WithTimeoutCause(ctx, time.Duration(c), cause)
	return bctx, func(err error) error {
		defer cancel()
		if !wasCut(bctx, err) {
			return err
		}
		if errors.Is(NotDone(err), ports.ErrNotDone) {
			return cutError(context.Cause(bctx), err, ports.ErrNotDone)
		}
		return cutError(context.Cause(bctx), err)
	}
}

// cutError is err, of a statement its bound cut, as cause: it says err's
// text, but is only cause and also, the error being of a write never
// sent, ports.ErrNotDone.
func cutError(cause, err error, also ...error) error {
	return &cutErr{msg: cause.Error() + ": " + err.Error(), is: append([]error{cause}, also...)}
}

type cutErr struct {
	msg string
	is  []error
}

func (e *cutErr) Error() string   { return e.msg }
func (e *cutErr) Unwrap() []error { return e.is }

// wasCut reports whether err is of a statement its bound, rather than its
// caller, ended: a context or connection timeout while the bound's cause
// is ErrUnanswered. The server's own answer (a PgError) is kept as it is.
// Such an error is then not wrapped whole (cutError), so that it no longer
// says context.DeadlineExceeded, which would read as the caller's deadline.
func wasCut(bctx context.Context, err error) bool {
	if err == nil || errors.Is(err, ErrUnanswered) || !errors.Is(context.Cause(bctx), ErrUnanswered) {
		return false
	}
	return errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err)
}
