package httpapi

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/abi-engine/engine/internal/quota"
)

// Bounds of the requests in flight on the routes that call the services,
// but object transfers (see transferSlots). Every HTTP client reaches the
// engine as the API's one caller, which the engine runs 64 calls of at
// once and lets 64 more wait (natsapi's admission); without a share here,
// one client with that many slow calls in flight held all of them, and
// every other client's call waited behind its calls or was refused.
const (
	// DefaultMaxRequests is how many such requests the API has in flight
	// at once: what the engine takes of one caller, running and waiting.
	DefaultMaxRequests = 128
	// DefaultRequestShareDivisor gives one client's share of them: a
	// quarter, as for bodies and transfers.
	DefaultRequestShareDivisor = 4
)

// requestSlots admits a request, or answers 503 with a Retry-After, before
// its body is read, when the API has its most in flight or the client
// (see clients) its share of them. The slot is held until h returns,
// which is when the engine has answered the call: a client that hangs up
// meanwhile does not end the call (answeredWhole).
func (a *api) requestSlots(h http.HandlerFunc) http.HandlerFunc {
	return a.slotted(a.requests, h, func(share bool, held int64) string {
		if share {
			return fmt.Sprintf("this client has %d requests in flight, its share of the %d this API has at once; try again later",
				held, a.maxRequests)
		}
		return fmt.Sprintf("%d requests are in flight, the most this API has at once; try again later", a.maxRequests)
	})
}

// slotted runs h holding one of q's slots for the request's client, or
// answers 503 with a Retry-After, saying what refused says, when q has
// its most taken, or the client (share) holds its share of them (held).
func (a *api) slotted(q *quota.Quota, h http.HandlerFunc, refused func(share bool, held int64) string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		client := a.clients.of(r)
		if err := q.Take(client, 1); err != nil {
			var over *quota.Over
			share := errors.As(err, &over) && over.Share
			var held int64
			if share {
				held = over.Held
			}
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, refused(share, held))
			return
		}
		defer q.Give(client, 1)
		h(w, r)
	}
}
