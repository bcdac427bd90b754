package callerauth_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/abi-engine/engine/internal/callerauth"
)

func TestSignAndVerify(t *testing.T) {
	secret := []byte("s3cret")
	tok, err := callerauth.Sign(secret, "module-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	caller, err := callerauth.Verify(secret, tok)
	if err != nil || caller != "module-a" {
		t.Fatalf("Verify = %q, %v", caller, err)
	}
}

func TestVerifyRefuses(t *testing.T) {
	secret := []byte("s3cret")
	good, _ := callerauth.Sign(secret, "a", time.Minute)
	expired, _ := callerauth.Sign(secret, "a", -time.Minute)
	forged, _ := callerauth.Sign([]byte("other"), "a", time.Minute)
	noCaller, _ := callerauth.Sign(secret, "", time.Minute)
	parts := strings.Split(good, ".")
	tampered := parts[0] + "." + parts[1] + "x." + parts[2]
	for name, tok := range map[string]string{
		"missing": "", "expired": expired, "forged": forged, "no caller": noCaller,
		"tampered": tampered, "garbage": "not.a.jwt", "none alg": "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0.",
	} {
		if _, err := callerauth.Verify(secret, tok); !errors.Is(err, callerauth.ErrInvalid) {
			t.Errorf("%s token: err %v, want ErrInvalid", name, err)
		}
	}
}

func TestSignerReusesAFreshToken(t *testing.T) {
	s := callerauth.NewSigner([]byte("k"), "c")
	a, err := s.Token()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.Token()
	if a != b {
		t.Fatalf("a fresh token was signed again")
	}
	if _, err := callerauth.NewSigner(nil, "c").Token(); err == nil {
		t.Fatalf("signed with an empty secret")
	}
}

func FuzzVerify(f *testing.F) {
	good, _ := callerauth.Sign([]byte("k"), "c", time.Minute)
	f.Add(good)
	f.Add("")
	f.Add("a.b.c")
	f.Fuzz(func(t *testing.T, tok string) {
		caller, err := callerauth.Verify([]byte("k"), tok)
		if err == nil && caller == "" {
			t.Fatalf("accepted %q without a caller", tok)
		}
	})
}

// A token is a bearer token until it expires, and the security model
// rests on that being short: whoever sees one may replay it for as long as
// it lives. So the engine refuses a token whose expiry is further ahead
// than a token may live, whoever minted it: a caller in another language
// that signs tokens for a day must not make a leaked one good for a day.
func TestATokenThatLivesLongerThanTheTTLIsRefused(t *testing.T) {
	secret := []byte("s3cret")
	for _, ttl := range []time.Duration{callerauth.TTL + 2*time.Minute, 24 * time.Hour, 10 * 365 * 24 * time.Hour} {
		tok, err := callerauth.Sign(secret, "a", ttl)
		if err != nil {
			t.Fatal(err)
		}
		if caller, err := callerauth.Verify(secret, tok); !errors.Is(err, callerauth.ErrInvalid) {
			t.Errorf("a token valid for %v: Verify = %q, %v; want ErrInvalid", ttl, caller, err)
		}
	}
	// A token of the full TTL passes, even from a caller whose clock runs
	// a little ahead of the engine's.
	for _, ahead := range []time.Duration{0, 30 * time.Second} {
		tok, err := callerauth.Sign(secret, "a", callerauth.TTL+ahead)
		if err != nil {
			t.Fatal(err)
		}
		if caller, err := callerauth.Verify(secret, tok); err != nil || caller != "a" {
			t.Errorf("a token of the TTL from a clock %v ahead: Verify = %q, %v", ahead, caller, err)
		}
	}
}
