// Package redact hides the credentials that NATS and database URLs carry
// in their user info, so a URL can be logged, reported in /status or put
// in an error without giving away a password or a token.
package redact

import "strings"

// Mask replaces a hidden credential.
const Mask = "***"

// urlEnd are the bytes that end a URL where it stands in a list or in
// running text; authorityEnd also end its authority.
const (
	urlEnd       = ",;\"'`<>()[]{} \t\r\n"
	authorityEnd = "/?#" + urlEnd
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
			at = strings.LastIndex(this[:end(this, urlEnd)], "@")
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
