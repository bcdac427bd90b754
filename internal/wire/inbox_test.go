package wire_test

import (
	"testing"

	"github.com/abi-engine/engine/internal/wire"
)

func TestIsInbox(t *testing.T) {
	for subject, want := range map[string]bool{
		"_INBOX.abc":                  true,
		"_INBOX.caller_a.xyz.1":       true,
		"_INBOX.":                     false,
		"_INBOX":                      false,
		"_INBOX..a":                   false,
		"_INBOX.a.":                   false,
		"_INBOX.a..b":                 false,
		"_INBOX.*":                    false,
		"_INBOX.a.>":                  false,
		"_INBOX.a b":                  false,
		"$KV.ABI_ENGINE.owner":        false,
		"abi.engine.events":           false,
		"_inbox.a":                    false,
		"$JS.API.STREAM.PURGE.KV_ABI": false,
	} {
		if got := wire.IsInbox(subject); got != want {
			t.Errorf("IsInbox(%q) = %v, want %v", subject, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { wire.IsInbox("_INBOX.caller_a.Zx81kQ.42") }); n != 0 {
		t.Errorf("IsInbox allocates %v times a call; every answer passes it", n)
	}
}
