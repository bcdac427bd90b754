// Package callerauth signs and checks the short-lived tokens callers put in
// the Nats-Auth-Token header when the engine requires signed calls: HS256
// JWTs that name the caller, signed with the deployment's caller secret.
package callerauth

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// ErrInvalid is a token that is missing, expired, forged or malformed.
var ErrInvalid = errors.New("invalid caller token")

// TTL is how long a token is valid; a signer makes a new one before then.
// It is also the longest a token may live: Verify refuses one whose expiry
// is further ahead than TTL and ClockSkew, whoever signed it, since a token
// is a bearer token and whoever sees it may replay it until then.
const TTL = 5 * time.Minute

// ClockSkew is how far ahead of the engine's a caller's clock may run and
// its fresh tokens still pass.
const ClockSkew = time.Minute

const issuer = "abi-engine"

// Sign returns a token for caller, valid for ttl from now.
func Sign(secret []byte, caller string, ttl time.Duration) (string, error) {
	if len(secret) == 0 {
		return "", errors.New("sign a caller token: empty secret")
	}
	now := time.Now()
	claims := jwt.RegisteredClaims{
		Issuer:    issuer,
		Subject:   caller,
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
}

// Verify checks token and returns the caller it names.
func Verify(secret []byte, token string) (string, error) {
	if token == "" {
		return "", fmt.Errorf("%w: no token", ErrInvalid)
	}
	var claims jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(token, &claims, func(*jwt.Token) (any, error) { return secret, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithIssuer(issuer),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(5*time.Second))
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if claims.Subject == "" {
		return "", fmt.Errorf("%w: no caller named", ErrInvalid)
	}
	if longest := time.Now().Add(TTL + ClockSkew); claims.ExpiresAt.After(longest) {
		return "", fmt.Errorf("%w: the token expires at %s, more than %v from now: a token lives at most %v",
			ErrInvalid, claims.ExpiresAt.UTC().Format(time.RFC3339), TTL+ClockSkew, TTL)
	}
	return claims.Subject, nil
}

// Signer hands out a valid token for one caller, signing a new one when
// the last is near its expiry.
type Signer struct {
	secret []byte
	caller string

	mu      sync.Mutex
	token   string
	renewAt time.Time
}

// NewSigner signs for caller with secret.
func NewSigner(secret []byte, caller string) *Signer {
	return &Signer{secret: secret, caller: caller}
}

// Caller is the name the tokens carry.
func (s *Signer) Caller() string { return s.caller }

// Token returns a token valid for at least half its lifetime.
func (s *Signer) Token() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token != "" && time.Now().Before(s.renewAt) {
		return s.token, nil
	}
	t, err := Sign(s.secret, s.caller, TTL)
	if err != nil {
		return "", err
	}
	s.token, s.renewAt = t, time.Now().Add(TTL/2)
	return t, nil
}
