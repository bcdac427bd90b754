package natsclient

import (
	"context"
	"testing"
	"time"
)

// A wait between attempts is not begun when it would leave the attempt
// after it less than its room before the deadline: a call whose every
// attempt found no engine then answers unavailable at once, rather than
// a timeout of an attempt begun too late.
func TestAWaitLeavingTheNextAttemptNoRoomIsNotBegun(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	if !sleep(ctx, time.Millisecond, attemptRoom) {
		t.Fatal("a wait with an hour left was refused")
	}
	short, cancelShort := context.WithTimeout(t.Context(), attemptRoom)
	defer cancelShort()
	if sleep(short, time.Millisecond, attemptRoom) {
		t.Fatalf("a wait leaving its attempt less than %v was begun", attemptRoom)
	}
}
