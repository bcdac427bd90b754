// Package redact hides the credentials that NATS and database URLs carry
// in their user info, so a URL can be logged, reported in /status or put
// in an error without giving away a password or a token.
package redact

import "strings"

// Mask replaces a hidden credential.
const Mask = "***"

// textEnd are the bytes that end a URL in running text, where nothing of
// its user info can stand (a password may hold "(", ";", "'" and the other
// sub-delims unescaped, as url.Parse, and so nats.go and pgx, take it);
// authorityEnd also end its authority.
const (
	textEnd      = "\"`<> \t\r\n"
	authorityEnd = "/?#" + textEnd
)

// URLs hides the credentials of every URL in s, which may be one URL, a
// comma-separated list or an error message that quotes some. In
// "scheme://user:password@host" the password is hidden and the user kept;
// in "scheme://secret@host", where NATS reads a lone user as a token, the
// whole user info is hidden. Text that is no URL is returned as it is.
func URLs(s string) string {
	if !strings.Contains(s, "://") || !strings.Contains(s, "@") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for {
		i := strings.Index(s, "://")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i+3])
		s = s[i+3:]
		// This URL ends where the next one begins, at the latest.
		this := s
		if next := strings.Index(s, "://"); next >= 0 {
			this = s[:next]
		}
		// The host follows the last "@" of the authority, as url.Parse
		// reads it, so a password with an unescaped "@" is hidden whole.
		at := strings.LastIndex(this[:end(this, authorityEnd)], "@")
		if at < 0 {
			// A password with an unescaped "/", "?" or "#" ends the
			// authority early; the "@" after it still ends the user info.
			// In running text this may hide more than the user info:
			// never less.
			at = strings.LastIndex(this[:end(this, textEnd)], "@")
		}
		if at < 0 {
			continue
		}
		userinfo := s[:at]
		if user, _, ok := strings.Cut(userinfo, ":"); ok {
			b.WriteString(user + ":" + Mask)
		} else if userinfo != "" {
			b.WriteString(Mask)
		}
		s = s[at:]
	}
}

// end is where the first of the bytes in set is in s, or len(s).
func end(s, set string) int {
	if i := strings.IndexAny(s, set); i >= 0 {
		return i
	}
	return len(s)
}

// URL hides the credentials of one URL that may be malformed, as a
// configuration's value is before it is checked: one with no "://" (a
// slash or a colon forgotten) still hides whatever comes before its last
// "@", and one with it everything between "://" and its last "@" but the
// user, whatever characters the password holds. URLs, which reads URLs out
// of any text, ends one at a blank, a quote or an angle bracket, so it
// would show the rest of a password typed with one as it is.
func URL(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		if at := strings.LastIndex(raw, "@"); at >= 0 {
			return Mask + raw[at:]
		}
		return raw
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return raw
	}
	if user, _, ok := strings.Cut(rest[:at], ":"); ok {
		return scheme + "://" + user + ":" + Mask + rest[at:]
	}
	return scheme + "://" + Mask + rest[at:]
}

// Error is err with the credentials of the URLs its text quotes hidden
// (URLs); it still matches what err matches.
func Error(err error) error {
	if err == nil {
		return nil
	}
	return hidden{msg: URLs(err.Error()), err: err}
}

type hidden struct {
	msg string
	err error
}

func (h hidden) Error() string { return h.msg }
func (h hidden) Unwrap() error { return h.err }
