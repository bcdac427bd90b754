package natsapi

import (
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/internal/wire"
)

// FuzzAnswerBy feeds any Abi-Wait value, outside input, to the engine's
// reader of it: it never panics, reads only a whole number of milliseconds,
// zero or above, and then names a moment no earlier than the call's arrival
// and no later than the caller's wait after it, leaving the answer at least
// a tenth of a longer wait, or half a wait under half a second, to reach
// the caller.
func FuzzAnswerBy(f *testing.F) {
	for _, s := range []string{"", "0", "1", "499", "500", "10000", "-1", "+5", " 5", "5ms", "1e3",
		"9223372036854", "9223372036855", "9223372036854775807", "99999999999999999999"} {
		f.Add(s)
	}
	arrived := time.Date(2026, 12, 7, 10, 2, 11, 0, time.UTC)
	f.Fuzz(func(t *testing.T, value string) {
		by, ok := answerBy(&Call{Header: nats.Header{wire.WaitHeader: {value}}}, arrived)
		ms, err := strconv.ParseInt(value, 10, 64)
		if !ok {
			if err == nil && ms >= 0 && ms <= int64(time.Duration(1<<63-1)/time.Millisecond) {
				t.Fatalf("Abi-Wait %q, a whole number of milliseconds, was not read", value)
			}
			return
		}
		if err != nil || ms < 0 {
			t.Fatalf("Abi-Wait %q, not a whole number of milliseconds zero or above, was read as %v", value, by)
		}
		wait := time.Duration(ms) * time.Millisecond
		room := wait - by.Sub(arrived)
		if by.Before(arrived) || room < min(wait/2, answerRoom) || room < wait/10 {
			t.Fatalf("Abi-Wait %q: the answer is due %v after the call arrived, leaving %v of a %v wait", value, by.Sub(arrived), room, wait)
		}
	})
}
