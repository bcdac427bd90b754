package jsbucket

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// natsKey is what NATS accepts as a key token: no "." so it stays one token.
var natsKey = regexp.MustCompile(`^[-/_=a-zA-Z0-9]+$`)

// Every key makes one valid token that decodes back to it, and two keys
// keep their byte order as tokens.
func FuzzEncode(f *testing.F) {
	for _, s := range []string{"a", "a/b", "../x", " ", "unicode-é-日本-🙂", "\x00", "\xff", strings.Repeat("é", 512)} {
		f.Add(s, s+"x")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if a == "" || b == "" {
			return
		}
		ta, tb := Encode(a), Encode(b)
		if !natsKey.MatchString(ta) {
			t.Fatalf("Encode(%q) = %q: not a NATS key token", a, ta)
		}
		if back, err := Decode(ta); err != nil || back != a {
			t.Fatalf("Decode(Encode(%q)) = %q, %v", a, back, err)
		}
		if (a < b) != (ta < tb) || (a == b) != (ta == tb) {
			t.Fatalf("order lost: %q < %q is %v, tokens %q < %q is %v", a, b, a < b, ta, tb, ta < tb)
		}
	})
}

// Tokens come from the broker's subject list, where anyone may have
// written: a token Encode did not make is refused, never misread.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{"-", "--", "Mk", "Mk-", "Mk_", "a.b", "=", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, token string) {
		k, err := Decode(token)
		if err != nil {
			return
		}
		if Encode(k) != token {
			t.Fatalf("Decode(%q) = %q, which encodes as %q", token, k, Encode(k))
		}
	})
}

func TestLongestKeyFitsASubject(t *testing.T) {
	k := strings.Repeat("é", 512)
	if !utf8.ValidString(k) || len(k) != 1024 {
		t.Fatal("bad test key")
	}
	if n := len(Encode(k)); n != 1366 {
		t.Fatalf("a key of 1024 bytes makes a token of %d characters, want 1366", n)
	}
}
