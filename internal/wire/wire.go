// Package wire is the kernel services' protocol on NATS, shared by the
// endpoints that serve it and the client facades that call it: subjects,
// headers, status codes and the JSON bodies of every operation. The
// protocol itself is described for other languages in docs/protocol.md.
package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/abi-engine/engine/ports"
)

// SubjectPrefix starts every kernel service subject.
const SubjectPrefix = "abi.svc."

// Subject is the queue-grouped subject of a one-shot operation:
// abi.svc.<service>.v1.<operation>.
func Subject(service, operation string) string {
	return SubjectPrefix + service + ".v1." + operation
}

// OwnerSubject is where a session's later messages go: only the engine
// instance that owns the session subscribes to it.
func OwnerSubject(service, owner, operation string) string {
	return SubjectPrefix + service + ".v1." + owner + "." + operation
}

// InboxPrefix starts every subject an engine answers on. A call's reply
// subject is the caller's to choose, and the engine may publish where its
// callers may not (the lease key, the JetStream API, the data buckets), so
// it answers only into inboxes: a call whose reply is elsewhere is dropped
// unanswered. A custom inbox prefix (nats.inbox_prefix) must start with it.
const InboxPrefix = "_INBOX."

// IsInbox reports whether subject is an inbox an engine may answer on: a
// literal subject under InboxPrefix.
func IsInbox(subject string) bool {
	rest, ok := strings.CutPrefix(subject, InboxPrefix)
	if !ok || rest == "" {
		return false
	}
	// Every answer passes here: the tokens are checked in place.
	last := byte('.')
	for i := 0; i < len(rest); i++ {
		switch c := rest[i]; c {
		case '*', '>', ' ', '\t', '\r', '\n':
			return false
		case '.':
			if last == '.' {
				return false
			}
			last = c
		default:
			last = c
		}
	}
	return last != '.'
}

// QueueGroup is the queue group of a service's endpoints: every serving
// engine joins it, so each call reaches one of them.
func QueueGroup(service string) string { return "abi.svc." + service }

// MaxValues is the most JSON values one request body holds, counted as
// strictjson.Values counts them: every object, array, string, number,
// true, false and null, but the numbers of a vector, four bytes each once
// read, of which every eighth counts. Decoded
// into Go, a value costs far more than its text, up to a few hundred bytes
// for an object of two, so a body's bytes bound its memory only with its
// count of values: a body at this bound allocates some tens of MiB while
// it is decoded, whatever its shape, where a 16 MiB body of empty objects
// took 357 MiB. It is about what a 1 MiB message, the broker's default
// max_payload, holds of ordinary JSON (ADR 0017).
const MaxValues = 100_000

// Headers.
const (
	// AuthHeader carries the caller's signed token when callers must sign.
	AuthHeader = "Nats-Auth-Token"
	// TermHeader carries, in decimal, the fencing token of the serving
	// term a call was made under (ports.FencingToken), when it was made
	// under one: a job of an engine's module calls through the facades.
	// An engine serving under a newer term refuses the call unrun.
	TermHeader = "Abi-Term"
	// WaitHeader carries, in decimal milliseconds, how long the caller
	// still waits for the answer as it sends the call: a length of time,
	// not a moment, so the clocks of two hosts are never compared.
	WaitHeader = "Abi-Wait"
	// ErrorHeader and ErrorCodeHeader are the NATS micro error headers.
	ErrorHeader     = "Nats-Service-Error"
	ErrorCodeHeader = "Nats-Service-Error-Code"
)

// Status codes, HTTP's, in the micro error header.
const (
	CodeBadRequest   = 400
	CodeUnauthorized = 401
	CodeNotFound     = 404
	CodeConflict     = 409
	CodeTooLarge     = 413
	CodeInternal     = 500
	CodeUnavailable  = 503
	CodeStorageFull  = 507
)

// Errors only the wire has: the caller was refused, or the engine could
// not take the call (draining, fenced, or gone).
var (
	ErrUnauthorized = errors.New("unauthorized")
	// ErrUnavailable (503): the engine did nothing with the call, so
	// sending it again is safe.
	ErrUnavailable = errors.New("engine unavailable")
	// ErrInterrupted (500): the call had started when the engine stopped it
	// (fencing, the drain deadline); it may or may not have taken effect,
	// so it is not sent again on its own.
	ErrInterrupted = errors.New("call interrupted")
)

// CodeOf maps an error to the status code the endpoint answers with.
func CodeOf(err error) int {
	switch {
	case errors.Is(err, ports.ErrInvalidArgument):
		return CodeBadRequest
	case errors.Is(err, ErrUnauthorized):
		return CodeUnauthorized
	case errors.Is(err, ports.ErrNotFound):
		return CodeNotFound
	case errors.Is(err, ports.ErrConflict):
		return CodeConflict
	case errors.Is(err, ports.ErrTooLarge):
		return CodeTooLarge
	case errors.Is(err, ErrUnavailable), errors.Is(err, ports.ErrFenced):
		return CodeUnavailable
	case errors.Is(err, ports.ErrStorageFull):
		return CodeStorageFull
	case errors.Is(err, ports.ErrNotDone) && !errors.Is(err, ErrInterrupted):
		// The store did nothing with the write: it may be sent again. A
		// call the engine stopped while it ran stays a 500, as any such.
		return CodeUnavailable
	}
	return CodeInternal
}

// RemoteError is an error answered by an engine. It matches the sentinel
// of its code, so errors.Is(err, ports.ErrNotFound) holds on either side.
type RemoteError struct {
	Code    int
	Message string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("engine answered %d: %s", e.Code, e.Message)
}

// Is matches the sentinel of the code.
func (e *RemoteError) Is(target error) bool {
	switch e.Code {
	case CodeBadRequest:
		return target == ports.ErrInvalidArgument
	case CodeUnauthorized:
		return target == ErrUnauthorized
	case CodeNotFound:
		return target == ports.ErrNotFound
	case CodeConflict:
		return target == ports.ErrConflict
	case CodeTooLarge:
		return target == ports.ErrTooLarge
	case CodeUnavailable:
		return target == ErrUnavailable
	case CodeStorageFull:
		return target == ports.ErrStorageFull
	}
	return false
}

// ErrorFromHeaders reads the micro error headers; nil when there are none.
func ErrorFromHeaders(code, message string) error {
	if code == "" {
		return nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(code))
	if err != nil {
		n = CodeInternal
	}
	return &RemoteError{Code: n, Message: message}
}

// Bytes is a byte string, base64 in JSON as Go writes []byte. Input that is
// not base64 is refused as a type error, so the decoder names the field.
type Bytes []byte

// UnmarshalJSON reads a base64 string or null.
func (b *Bytes) UnmarshalJSON(data []byte) error {
	var raw []byte
	if err := json.Unmarshal(data, &raw); err != nil {
		return &json.UnmarshalTypeError{Value: "not base64", Type: reflect.TypeFor[Bytes]()}
	}
	*b = raw
	return nil
}

// IsBytes reports whether t is Bytes, so a decoder can say "want base64".
func IsBytes(t reflect.Type) bool { return t == reflect.TypeFor[Bytes]() }

// Seconds is a time to live in seconds, a JSON number, where 0 keeps the
// value for good. A number that is not 0 but too small for a float64 to be
// told from it (1e-400) is refused as a type error, as encoding/json
// refuses one too large (1e400): read as the float64 would hold it, a TTL
// the caller meant to be tiny would keep the value forever.
type Seconds float64

// UnmarshalJSON reads a JSON number, or null, which leaves s as it is (a
// body that may not give null tags its field strictjson:"notnull").
func (s *Seconds) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		return nil
	}
	bad := &json.UnmarshalTypeError{Value: "number " + string(data), Type: reflect.TypeFor[Seconds]()}
	if len(data) == 0 || (data[0] != '-' && (data[0] < '0' || data[0] > '9')) {
		bad.Value = "not a number"
		return bad
	}
	f, err := strconv.ParseFloat(string(data), 64)
	if err != nil || (f == 0 && notZero(data)) {
		return bad
	}
	*s = Seconds(f)
	return nil
}

// notZero reports whether the JSON number lit has a digit other than 0
// before its exponent: whether it is a number other than 0, whatever a
// float makes of it.
func notZero(lit []byte) bool {
	for _, c := range lit {
		switch {
		case c == 'e' || c == 'E':
			return false
		case c >= '1' && c <= '9':
			return true
		}
	}
	return false
}

// IsSeconds reports whether t is Seconds, so a decoder can say what a TTL
// takes.
func IsSeconds(t reflect.Type) bool { return t == reflect.TypeFor[Seconds]() }
