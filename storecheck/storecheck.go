// Package storecheck validates what callers hand to the storage adapters, so
// that every adapter of a port accepts and refuses the same input: a deploy
// that moves from the memory adapter to PostgreSQL meets no new refusals.
// It is public so that adapters written outside this repository apply the
// same rules; the contract suites check that they do.
package storecheck

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/abi-engine/engine/internal/strictjson"
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

// TTL checks a time to live: 0 keeps the value until deleted, anything
// else is ports.MinTTL to ports.MaxTTL.
func TTL(ttl time.Duration) error {
	switch {
	case ttl < 0:
		return fmt.Errorf("ttl %v is negative: %w", ttl, ports.ErrInvalidArgument)
	case ttl > 0 && ttl < ports.MinTTL:
		return fmt.Errorf("ttl %v is below %v and would round to zero, which keeps the value forever: %w", ttl, ports.MinTTL, ports.ErrInvalidArgument)
	case ttl > ports.MaxTTL:
		return fmt.Errorf("ttl %v is more than the most, %v: %w", ttl, ports.MaxTTL, ports.ErrInvalidArgument)
	}
	return nil
}

// TTLSeconds reads a TTL given in seconds under the name field, as the
// wire carries it, by TTL's rule; it is checked before it is converted, so
// a value too small or too large for a time.Duration cannot slip through.
func TTLSeconds(field string, seconds float64) (time.Duration, error) {
	switch {
	case seconds == 0:
		return 0, nil
	case math.IsNaN(seconds) || seconds < 0:
		return 0, fmt.Errorf("%s is %v, want 0 or more: %w", field, seconds, ports.ErrInvalidArgument)
	case seconds < ports.MinTTL.Seconds():
		return 0, fmt.Errorf("%s is %v, below %v: it would round to zero, which keeps the value forever: %w", field, seconds, ports.MinTTL.Seconds(), ports.ErrInvalidArgument)
	case seconds > ports.MaxTTL.Seconds():
		return 0, fmt.Errorf("%s is %v, more than the most, %d: %w", field, seconds, int64(ports.MaxTTL/time.Second), ports.ErrInvalidArgument)
	}
	return time.Duration(math.Round(seconds * float64(time.Second))), nil
}

// Limit checks a page size given under the name field and returns the one
// to use.
func Limit(field string, limit int) (int, error) {
	switch {
	case limit <= 0:
		return ports.DefaultPage, nil
	case limit > ports.MaxPage:
		return 0, fmt.Errorf("%s %d is more than the most, %d: %w", field, limit, ports.MaxPage, ports.ErrInvalidArgument)
	}
	return limit, nil
}

// Write checks what every write with a TTL takes: a valid key, named what
// in the error, and a TTL within TTL's bounds.
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

// JSON checks a value as encoding/json decodes it into any, named what in
// the error: it nests at most ports.MaxDepth levels, and no string or field
// name holds NUL, which PostgreSQL's jsonb cannot keep; every adapter
// refuses NUL alike, so no deploy meets it late. The error names the path.
func JSON(what string, v any) error {
	f := walkJSON(v, 1)
	if f == nil {
		return nil
	}
	slices.Reverse(f.path)
	at := strings.Join(f.path, "")
	if at == "" {
		return fmt.Errorf("%s: %s: %w", what, f.problem, ports.ErrInvalidArgument)
	}
	return fmt.Errorf("%s at %q: %s: %w", what, strings.TrimPrefix(at, "."), f.problem, ports.ErrInvalidArgument)
}

// Marshaled checks raw, what json.Marshal wrote from a caller's document,
// query value or payload, named what in the error, for text that was not
// UTF-8: json.Marshal writes each byte outside UTF-8 as U+FFFD, so a
// store that kept the JSON would keep text the caller never gave. Call it
// on the JSON of the caller's value, before anything is read back from
// it; JSON that claims the character U+FFFD by the escape \ufffd is
// refused too, as json.Marshal writes that character unescaped. The error
// names the path.
func Marshaled(what string, raw []byte) error {
	if err := strictjson.Marshaled(raw); err != nil {
		return fmt.Errorf("%s: %v: %w", what, err, ports.ErrInvalidArgument)
	}
	return nil
}

// jsonFault is what walkJSON found wrong, and where: path runs from the
// fault up to the top, each step ".field" or "[index]".
type jsonFault struct {
	path    []string
	problem string
}

func walkJSON(v any, depth int) *jsonFault {
	switch v := v.(type) {
	case string:
		if strings.IndexByte(v, 0) >= 0 {
			return &jsonFault{problem: `a string holds NUL (\u0000)`}
		}
	case map[string]any:
		if depth > ports.MaxDepth {
			return &jsonFault{problem: fmt.Sprintf("nests more than %d levels deep", ports.MaxDepth)}
		}
		for k, e := range v {
			if strings.IndexByte(k, 0) >= 0 {
				return &jsonFault{path: []string{"." + strconv.Quote(k)}, problem: `a field name holds NUL (\u0000)`}
			}
			if f := walkJSON(e, depth+1); f != nil {
				f.path = append(f.path, "."+k)
				return f
			}
		}
	case []any:
		if depth > ports.MaxDepth {
			return &jsonFault{problem: fmt.Sprintf("nests more than %d levels deep", ports.MaxDepth)}
		}
		for i, e := range v {
			if f := walkJSON(e, depth+1); f != nil {
				f.path = append(f.path, "["+strconv.Itoa(i)+"]")
				return f
			}
		}
	}
	return nil
}
