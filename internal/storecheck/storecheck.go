// Package storecheck validates what callers hand to the storage adapters, so
// that every adapter of a port accepts and refuses the same input: a deploy
// that moves from the memory adapter to PostgreSQL meets no new refusals.
package storecheck

import (
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/abi-engine/engine/ports"
)

// MaxKey is the longest key or document id, in bytes.
const MaxKey = 1024

// Key checks a key or document id: non-empty UTF-8 of at most MaxKey bytes.
// NUL is refused because PostgreSQL text cannot hold it.
func Key(what, key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%s is empty: %w", what, ports.ErrInvalidArgument)
	case len(key) > MaxKey:
		return fmt.Errorf("%s of %d bytes is longer than %d: %w", what, len(key), MaxKey, ports.ErrInvalidArgument)
	case !utf8.ValidString(key):
		return fmt.Errorf("%s %q is not UTF-8: %w", what, key, ports.ErrInvalidArgument)
	case strings.ContainsRune(key, 0):
		return fmt.Errorf("%s %q contains NUL: %w", what, key, ports.ErrInvalidArgument)
	}
	return nil
}

// Prefix checks a key prefix or cursor, which may be empty.
func Prefix(what, s string) error {
	if s == "" {
		return nil
	}
	return Key(what, s)
}

// TTL checks a time to live: 0 keeps the value until deleted.
func TTL(ttl time.Duration) error {
	if ttl < 0 {
		return fmt.Errorf("ttl %v is negative: %w", ttl, ports.ErrInvalidArgument)
	}
	return nil
}

// Write checks what every write with a TTL takes: a valid key, named what
// in the error, and a TTL that is not negative.
func Write(what, key string, ttl time.Duration) error {
	if err := Key(what, key); err != nil {
		return err
	}
	return TTL(ttl)
}

var collectionName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Collection checks a collection name against the port's rule.
func Collection(name string) error {
	if !collectionName.MatchString(name) {
		return fmt.Errorf("collection name %q is not 1 to 64 of [A-Za-z0-9_-]: %w", name, ports.ErrInvalidArgument)
	}
	return nil
}

// Field checks a top-level document field used in a query. Quotes and
// backslashes are refused because SQLite's JSON paths cannot carry them.
func Field(name string) error {
	if err := Key("field", name); err != nil {
		return err
	}
	if strings.ContainsAny(name, `"\`) {
		return fmt.Errorf("field %q contains a quote or backslash: %w", name, ports.ErrInvalidArgument)
	}
	return nil
}

var tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,49}$`)

// Table checks an SQL table name given in configuration under yamlKey. It
// leaves room for a suffix within PostgreSQL's 63 bytes.
func Table(yamlKey, name string) error {
	if !tableName.MatchString(name) {
		return fmt.Errorf("%s %q is not 1 to 50 of [a-z0-9_] starting with a letter or _: %w", yamlKey, name, ports.ErrInvalidArgument)
	}
	return nil
}
