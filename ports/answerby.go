package ports

import (
	"context"
	"time"
)

type answerByKey struct{}

// WithAnswerBy returns ctx carrying the moment, on this host's clock, by
// which a call's answer must be sent for its caller still to be waiting
// for it. An engine serving a call over NATS sets it from the time the
// caller said it would wait, so that a store waiting on something that may
// never come free (a file's lock another process holds) can stop in time
// to answer that it did nothing, where the caller would otherwise time out
// not knowing. The call's context itself does not end then: work the
// caller no longer waits for is not cut short.
func WithAnswerBy(ctx context.Context, t time.Time) context.Context {
	return &answerByContext{Context: ctx, by: t}
}

// answerByContext carries the moment in the context itself, so that every
// handled call pays one allocation for it, where context.WithValue also
// boxed the time as its value. It passes every other key, and Done and
// Err, to the context it wraps, so a context derived from it is canceled
// with that one as it would be with a value context.
type answerByContext struct {
	context.Context
	by time.Time
}

func (c *answerByContext) Value(key any) any {
	if key == (answerByKey{}) {
		return &c.by
	}
	return c.Context.Value(key)
}

// AnswerBy is the moment ctx carries, if any.
func AnswerBy(ctx context.Context) (time.Time, bool) {
	if t, ok := ctx.Value(answerByKey{}).(*time.Time); ok {
		return *t, true
	}
	return time.Time{}, false
}
