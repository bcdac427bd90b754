package ports

import (
	"context"
	"errors"
	"time"

	"github.com/abi-engine/engine/domain"
)

// ErrFenced: a shared store refused a write because it has seen a newer
// serving term than the one the write carries. The write did not happen,
// so the call may be sent again, to the engine that serves now.
var ErrFenced = errors.New("fenced: a newer engine has written to this store")

type fencingTokenKey struct{}

// WithFencingToken returns ctx carrying the fencing token of the serving
// term under which a call was admitted: the lease revision at which that
// term began, which only grows for an account. Stores that can check it
// in the same transaction as a write refuse a write whose token is older
// than one they have seen, with ErrFenced, and let a newer one raise it.
func WithFencingToken(ctx context.Context, token uint64) context.Context {
	return context.WithValue(ctx, fencingTokenKey{}, token)
}

// FencingToken is the token ctx carries, if any. A write without one, from
// a tool or a test, is not fenced, and leaves the fence where it was.
func FencingToken(ctx context.Context) (uint64, bool) {
	t, ok := ctx.Value(fencingTokenKey{}).(uint64)
	return t, ok && t > 0
}

// TermEnder is a store that keeps something for a serving term, such as
// the values it read under that term's token. Before an engine writes its
// release, it ends its term in every such store: the calls it still
// answers while it drains, under the ended term's token, then go to the
// backend itself, where its successor's writes are.
type TermEnder interface {
	// EndTerm ends every term up to token (math.MaxUint64: every term):
	// nothing kept under one is served again, and none begins anew.
	EndTerm(token uint64)
}

// RaiseHolder is a store whose fence a term raises at its first write,
// and which is told of every term as it begins, before any call of it,
// whether to hold that raise back: a successor that took the lease from a
// holder that released it holds it, so that the predecessor's transfers
// still draining are not refused for the successor's writes alone; any
// other term holds it not at all, and the store raises its fence to the
// term at once, though the term may never write to it: a successor's held
// writes are conditioned on the fence as it stands, and an engine older
// than a predecessor that left it below its own term would land its
// writes through that hold (ADR 0023).
type RaiseHolder interface {
	// HoldRaise has the writes under token, until clock reads until,
	// checked against the fence and refused when a newer term raised it,
	// without raising it; once clock reads until (at once, when it reads
	// it already) the store raises it for the term without a write,
	// trying again after a failure, and the term's first write from until
	// on raises it if that has not; a store that closes before it has
	// raises it as it closes, its term's writes being over. clock is the
	// one the lease is judged by, which counts the time the machine
	// spent suspended: a hold judged on Go's clock, which stands still in
	// a suspend, would end that much later than the drain it waits for,
	// and leave an older engine's writes unfenced meanwhile.
	HoldRaise(token uint64, until time.Time, clock domain.Clock)
}
