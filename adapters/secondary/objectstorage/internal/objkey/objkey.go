// Package objkey holds the input rules every object storage adapter
// enforces the same way, so that the adapters agree on what is invalid.
package objkey

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

// MaxKeyBytes is the longest key, as in S3.
const MaxKeyBytes = 1024

// DefaultContentType is stored when a Put names none.
const DefaultContentType = "application/octet-stream"

// Check rejects a key that is empty, longer than MaxKeyBytes, not UTF-8
// or holding a NUL.
func Check(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("object key is empty: %w", ports.ErrInvalidArgument)
	case len(key) > MaxKeyBytes:
		return fmt.Errorf("object key of %d bytes is longer than %d: %w", len(key), MaxKeyBytes, ports.ErrInvalidArgument)
	case !utf8.ValidString(key):
		return fmt.Errorf("object key %q is not UTF-8: %w", key, ports.ErrInvalidArgument)
	case strings.IndexByte(key, 0) >= 0:
		// As every service's keys (storecheck.Key): no file name holds a
		// NUL, so a store that keeps objects as files could not keep it.
		return fmt.Errorf("object key %q contains NUL: %w", key, ports.ErrInvalidArgument)
	}
	return nil
}

// CheckPathClean rejects, beyond Check, a key with ".", ".." or empty
// segments, for stores that map keys to paths.
func CheckPathClean(key string) error {
	if err := Check(key); err != nil {
		return err
	}
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("object key %q has a %q segment, which an S3 server keeping files could store as another key: %w", key, seg, ports.ErrInvalidArgument)
		}
	}
	return nil
}

// CheckPut checks a Put's key and options.
func CheckPut(key string, opts ports.PutObjectOptions) error {
	if err := Check(key); err != nil {
		return err
	}
	if opts.IfAbsent && opts.IfMatch != "" {
		return fmt.Errorf("put %q: IfAbsent and IfMatch together: %w", key, ports.ErrInvalidArgument)
	}
	if len(opts.ContentType) > ports.MaxContentType {
		return fmt.Errorf("put %q: content_type of %d bytes is longer than %d: %w", key, len(opts.ContentType), ports.MaxContentType, ports.ErrInvalidArgument)
	}
	if !printable(opts.ContentType) {
		return fmt.Errorf("put %q: content_type %q holds a byte that is not printable ASCII: %w", key, opts.ContentType, ports.ErrInvalidArgument)
	}
	// No ETag holds such a byte, and S3 could not send it: the condition
	// could only fail, and on S3 as the engine's own error.
	if !printable(opts.IfMatch) {
		return fmt.Errorf("put %q: if_match %q holds a byte that is not printable ASCII: %w", key, opts.IfMatch, ports.ErrInvalidArgument)
	}
	return nil
}

// CheckDeleteIfMatch checks a DeleteIfMatch's key and ETag: an empty ETag
// names no version, and one that is not printable ASCII none an ETag can
// be (CheckPut).
func CheckDeleteIfMatch(key, etag string) error {
	if err := Check(key); err != nil {
		return err
	}
	if etag == "" {
		return fmt.Errorf("delete %q if the ETag matches: the ETag is empty: %w", key, ports.ErrInvalidArgument)
	}
	if !printable(etag) {
		return fmt.Errorf("delete %q if the ETag is %q: it holds a byte that is not printable ASCII: %w", key, etag, ports.ErrInvalidArgument)
	}
	return nil
}

// printable reports whether s is printable ASCII, space included: what an
// HTTP header carries as it is (S3 sends the content type and the ETag of
// a condition as headers; a line break would end the header, a control
// character or a byte past ASCII is refused or altered on the way).
func printable(s string) bool {
	for i := range len(s) {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// CheckGet checks a Get's key and that its range is not negative.
func CheckGet(key string, opts ports.GetObjectOptions) error {
	if err := Check(key); err != nil {
		return err
	}
	if opts.Offset < 0 || opts.Length < 0 {
		return fmt.Errorf("get %q: range offset %d, length %d: negative: %w", key, opts.Offset, opts.Length, ports.ErrInvalidArgument)
	}
	return nil
}

// Span returns where a range of an object of the given size starts and how
// many bytes it holds. An offset past the end is invalid; a range that runs
// past the end stops there.
func Span(key string, opts ports.GetObjectOptions, size int64) (offset, length int64, err error) {
	if opts.Offset > size {
		return 0, 0, fmt.Errorf("get %q: offset %d is past the end of %d bytes: %w", key, opts.Offset, size, ports.ErrInvalidArgument)
	}
	length = size - opts.Offset
	if opts.Length > 0 && opts.Length < length {
		length = opts.Length
	}
	return opts.Offset, length, nil
}

// CheckList checks a List's prefix and cursor: each empty, or a valid key
// (storecheck.Prefix), as every service's listings take them.
func CheckList(prefix, cursor string) error {
	return errors.Join(storecheck.Prefix("prefix", prefix), storecheck.Prefix("cursor", cursor))
}
