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
