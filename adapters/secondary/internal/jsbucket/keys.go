package jsbucket

import (
	"encoding/base64"
	"fmt"
	"strings"
)

// keyAlphabet is base64's 64 symbols taken from the characters NATS allows
// in a key, in ASCII order, so that encoding keeps the byte order of keys:
// for keys a < b, Encode(a) < Encode(b). "." is left out: it separates
// subject tokens.
const keyAlphabet = "-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"

// keyEncoding writes no padding and, strict, reads only what it writes, so
// every key has one token and every token one key.
var keyEncoding = base64.NewEncoding(keyAlphabet).WithPadding(base64.NoPadding).Strict()

// Encode turns a key of any bytes into one subject token. A key of 1024
// bytes makes 1366 characters.
func Encode(key string) string { return keyEncoding.EncodeToString([]byte(key)) }

// Decode is the inverse of Encode; a token Encode did not make is an error.
func Decode(token string) (string, error) {
	// The decoder skips "\r" and "\n"; a token holds neither.
	if token == "" || strings.Trim(token, keyAlphabet) != "" {
		return "", fmt.Errorf("key token %.40q is not made of %s", token, keyAlphabet)
	}
	b, err := keyEncoding.DecodeString(token)
	if err != nil {
		return "", fmt.Errorf("key token %.40q: %w", token, err)
	}
	return string(b), nil
}
