package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"

	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// errorBody is every error's JSON: {"error":{"code":404,"message":"..."}}.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, code int, message string) {
	writeJSON(w, code, errorBody{Error: errorDetail{Code: code, Message: message}})
}

// StatusOf maps a service's error to the HTTP status the API answers with.
func StatusOf(err error) int {
	var tooBig *http.MaxBytesError
	switch {
	case errors.Is(err, ports.ErrInvalidArgument):
		return http.StatusBadRequest
	case errors.Is(err, ports.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ports.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, ports.ErrTooLarge), errors.As(err, &tooBig):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ports.ErrStorageFull):
		return http.StatusInsufficientStorage
	case errors.Is(err, wire.ErrUnavailable), errors.Is(err, errBusy),
		errors.Is(err, ports.ErrNotDone) && !errors.Is(err, wire.ErrInterrupted):
		return http.StatusServiceUnavailable
	case errors.Is(err, wire.ErrUnauthorized):
		// The serving engine refused this engine's caller token: the
		// client did nothing wrong, the engines disagree on the secret.
		return http.StatusBadGateway
	case errors.Is(err, errTooSlow):
		return http.StatusRequestTimeout
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// fail answers err with its status; a server-side failure is also logged.
// A 500's, a 507's or a store's 503's text may name files of this host or
// a backend's internals, so the body says what failed and where in the
// log the rest is. Every 503 is of work that was not done, and says when
// to send it again (Retry-After).
func (a *api) fail(w http.ResponseWriter, r *http.Request, err error) {
	code := StatusOf(err)
	if code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	if errors.Is(err, errBusy) {
		// A refusal of work not begun, to be retried: nothing failed.
		writeError(w, code, err.Error())
		return
	}
	if code < 500 {
		writeError(w, code, err.Error())
		return
	}
	ref := logRef()
	a.log.Warn("HTTP API call failed", "method", r.Method, "path", r.URL.Path, "code", code, "ref", ref, "err", err)
	switch code {
	case http.StatusInternalServerError:
		writeError(w, code, fmt.Sprintf("%s %s failed in the engine (log ref %s)", r.Method, r.URL.Path, ref))
	case http.StatusInsufficientStorage:
		// As for a 500, the store's text may name a file of this host.
		writeError(w, code, fmt.Sprintf("%s %s: %v: the store has no room and wrote nothing (log ref %s)", r.Method, r.URL.Path, ports.ErrStorageFull, ref))
	case http.StatusServiceUnavailable:
		if errors.Is(err, ports.ErrNotDone) && !errors.Is(err, wire.ErrUnavailable) {
			// The store's refusal: its text may name a file of this host.
			writeError(w, code, fmt.Sprintf("%s %s: %v: the store did not do it and changed nothing; send it again (log ref %s)", r.Method, r.URL.Path, ports.ErrNotDone, ref))
			return
		}
		writeError(w, code, err.Error())
	default:
		writeError(w, code, err.Error())
	}
}

// logRef is a short random id that ties an answer to its log line.
func logRef() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
