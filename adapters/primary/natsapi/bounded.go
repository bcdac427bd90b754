package natsapi

import (
	"context"
	"fmt"

	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// replyLimitKey carries in a call's context the most bytes its answer may
// have: what one message holds, or, for a call that can fetch an overflow
// reply, the most an overflow session parks.
type replyLimitKey struct{}

// replyLimit is the most bytes call's answer may have on this host.
func (h *Host) replyLimit(call *Call) int {
	if call.Header.Get(wire.OverflowHeader) == "1" && h.opts.Overflow != nil {
		return int(h.opts.Overflow.maxValue)
	}
	return h.messageMost()
}

// replyLimits are the reply limits a call on this host may have, as
// replyLimit picks them.
func (h *Host) replyLimits() [2]int {
	limits := [2]int{h.messageMost(), h.messageMost()}
	if h.opts.Overflow != nil {
		limits[1] = int(h.opts.Overflow.maxValue)
	}
	return limits
}

// messageMost is the most bytes an answer may have to travel in one
// message, headers left room.
func (h *Host) messageMost() int { return int(h.opts.Replies.MaxPayload()) - replyHeadroom }

// listJSON adapts a handler whose answer is a list of items each of which
// may be large: {"<field>":[item,...]<rest>}, with rest the answer's other
// fields. The items are encoded one by one, and the call fails 413 as soon
// as the answer passes the most it may have (see replyLimit), so a page of
// large items is never built whole past that. The request is read as JSON
// reads it.
func listJSON[Req, T any](field string, f func(ctx context.Context, req Req) (items []T, rest []byte, err error)) HandlerFunc {
	return func(ctx context.Context, call *Call) ([]byte, error) {
		var req Req
		if d, ok := any(&req).(wire.FastDecoder); !ok || !d.DecodeJSON(call.Data) {
			if err := Decode(call.Data, &req); err != nil {
				return nil, err
			}
		}
		items, rest, err := f(ctx, req)
		if err != nil {
			return nil, err
		}
		most, bounded := ctx.Value(replyLimitKey{}).(int)
		out := append([]byte(`{"`+field+`":`), '[')
		for i, item := range items {
			raw, err := wire.Marshal(item)
			if err != nil {
				return nil, fmt.Errorf("encode item %d of the answer: %w", i, err)
			}
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, raw...)
			if bounded && len(out)+len(rest)+2 > most {
				return nil, fmt.Errorf("%w: the answer passes the %d bytes this call can take at item %d of %d; ask for fewer",
					ports.ErrTooLarge, most, i+1, len(items))
			}
		}
		out = append(out, ']')
		out = append(out, rest...)
		return append(out, '}'), nil
	}
}
