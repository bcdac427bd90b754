package httpapi

import (
	"net/netip"
	"strings"
)

// forwarded is the client that the Forwarded header (RFC 7239), given on
// these lines in order, names (see clients): each element is a hop, and
// its for parameter the address the hop was reached from. It is false
// when a line read does not split into elements, or an element read is
// malformed, has no for, or names no address (unknown, or an obfuscated
// name such as _hidden). A line is split from its start, since a quoted
// string may hold a comma, but its elements are read from the right and
// only as far as the client: a malformed one left of it, which the client
// wrote, is not read. Empty elements are skipped, as HTTP has it of lists.
//
// The split keeps no list, which for 64 KiB of commas made some 5 MiB of
// garbage for each request: it keeps where the right-most keptHops
// elements are, and they are read from the right. Only when every one of
// them is a trusted proxy, which only a host in the trusted ranges can
// make so, are the elements left of them read, from the left (leftOf).
func (c clients) forwarded(lines []string) (netip.Addr, bool) {
	var kept hopRing
	splitForwarded(lines, hop{line: len(lines)}, kept.add)
	var client netip.Addr
	for i := kept.n - 1; i >= kept.lo; i-- {
		h := kept.at(i)
		if h.unended {
			return netip.Addr{}, false
		}
		a, ok := forwardedFrom(h.element(lines))
		if !ok {
			return netip.Addr{}, false
		}
		client = a
		if !c.trusts(a) {
			return a, true
		}
	}
	if kept.lo == 0 {
		return client, client.IsValid()
	}
	return c.leftOf(lines, kept.at(kept.lo), client)
}

// leftOf is the client of Forwarded's lines when every element from end
// on is a trusted proxy, the one at end naming oldest: the right-most
// element left of end that is malformed or untrusted, or a line left of
// it that does not split, and when there is none, the left-most element.
// It reads the elements from the left, every one of them, and keeps only
// the answer so far.
func (c clients) leftOf(lines []string, end hop, oldest netip.Addr) (netip.Addr, bool) {
	var client netip.Addr
	decided, ok, seen := false, false, false
	splitForwarded(lines, end, func(h hop) {
		if h.unended {
			decided, ok = true, false
			return
		}
		a, valid := forwardedFrom(h.element(lines))
		switch {
		case !valid:
			decided, ok = true, false
		case !c.trusts(a):
			decided, ok, client = true, true, a
		case !seen:
			client = a
		}
		seen = true
	})
	switch {
	case decided && !ok:
		return netip.Addr{}, false
	case decided, seen:
		return client, true
	}
	return oldest, true
}

// keptHops is how many elements of Forwarded are kept to be read from
// the right: the client is among the few right-most, past the trusted
// proxies' own.
const keptHops = 64

// hop is where an element of Forwarded is, bytes from to to of a line,
// or, when unended, a line whose quoted string does not end.
type hop struct {
	line, from, to int
	unended        bool
}

// element is the text of h, trimmed of blanks.
func (h hop) element(lines []string) string {
	return strings.Trim(lines[h.line][h.from:h.to], " \t")
}

// hopRing keeps the right-most keptHops hops it is given, in a ring: the
// ith given, for lo <= i < n, is at(i). An unended line stands in place of
// the elements split of it.
type hopRing struct {
	ring  [keptHops]hop
	lo, n int
}

func (r *hopRing) at(i int) hop { return r.ring[i%keptHops] }

func (r *hopRing) add(h hop) {
	if h.unended {
		for r.n > r.lo && r.at(r.n-1).line == h.line {
			r.n--
		}
	}
	r.ring[r.n%keptHops] = h
	r.n++
	r.lo = max(r.lo, r.n-keptHops)
}

// splitForwarded gives each element of lines that is not blank to found,
// from the left, up to end, the first element not given (the whole of
// lines when its line is past the last): a line splits at the commas
// outside quoted strings. A line whose quoted string does not end is
// given last as an unended hop, after its elements.
func splitForwarded(lines []string, end hop, found func(hop)) {
	element := func(i, from, to int) {
		if strings.Trim(lines[i][from:to], " \t") != "" {
			found(hop{line: i, from: from, to: to})
		}
	}
	for i := 0; i < len(lines) && i <= end.line; i++ {
		line := lines[i]
		if i == end.line {
			// The end starts an element of a line that splits: what is
			// left of it is whole elements, and a comma.
			line = line[:end.from]
		}
		from, quoted := 0, false
		for j := 0; j < len(line); j++ {
			switch b := line[j]; {
			case quoted && b == '\\':
				j++
			case b == '"':
				quoted = !quoted
			case !quoted && b == ',':
				element(i, from, j)
				from = j + 1
			}
		}
		if quoted {
			found(hop{line: i, unended: true})
			continue
		}
		element(i, from, len(line))
	}
}

// forwardedFrom is the address an element's for parameter names. The
// element must be pairs of a token, "=" and a token or a quoted string,
// split by ";", with no blanks between (empty pairs are allowed), and
// must have one for.
func forwardedFrom(element string) (netip.Addr, bool) {
	var node string
	found := false
	for s := element; ; {
		if s != "" && s[0] != ';' {
			n := tokenLen(s)
			if n == 0 || n == len(s) || s[n] != '=' {
				return netip.Addr{}, false
			}
			name := s[:n]
			s = s[n+1:]
			value, rest, escaped, ok := forwardedValue(s)
			if !ok {
				return netip.Addr{}, false
			}
			s = rest
			if strings.EqualFold(name, "for") {
				if found {
					return netip.Addr{}, false
				}
				if escaped {
					value = unquote(value)
				}
				node, found = value, true
			}
		}
		if s == "" {
			break
		}
		if s[0] != ';' {
			return netip.Addr{}, false
		}
		s = s[1:]
	}
	if !found {
		return netip.Addr{}, false
	}
	return nodeIP(node)
}

// forwardedValue reads a pair's value from the start of s, a token or a
// quoted string, and returns it and the rest of s. A quoted string is
// returned as it stands between its quotes, and escaped tells whether it
// holds an escape, which unquote takes off: only the value of for is ever
// unescaped, so that the other values cost no copy.
func forwardedValue(s string) (value, rest string, escaped, ok bool) {
	if s == "" || s[0] != '"' {
		n := tokenLen(s)
		if n == 0 {
			return "", "", false, false
		}
		return s[:n], s[n:], false, true
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			return s[1:i], s[i+1:], escaped, true
		case c == '\\':
			i++
			if i == len(s) || !quotedText(s[i]) && s[i] != '"' && s[i] != '\\' {
				return "", "", false, false
			}
			escaped = true
		case !quotedText(c):
			return "", "", false, false
		}
	}
	return "", "", false, false
}

// unquote is the text of a quoted string's inside, v, with its escapes
// taken off (forwardedValue checked them).
func unquote(v string) string {
	var b strings.Builder
	b.Grow(len(v))
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// quotedText reports whether c may stand in a quoted string as itself:
// a blank, a visible character other than a quote or a backslash, or a
// byte past ASCII.
func quotedText(c byte) bool {
	return c == '\t' || c == ' ' || c == '!' || c >= '#' && c <= '[' || c >= ']' && c <= '~' || c >= 0x80
}

// tokenLen is how many bytes at the start of s are a token's characters.
func tokenLen(s string) int {
	for i := 0; i < len(s); i++ {
		if !tokenChar(s[i]) {
			return i
		}
	}
	return len(s)
}

func tokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// nodeIP is the address a node of Forwarded names: an IPv4 address, or an
// IPv6 one in brackets, either with a port (digits, or an obfuscated one
// such as _p1) or without. unknown and obfuscated names name none, and
// neither does an address with a zone, which no other host can reach.
func nodeIP(node string) (netip.Addr, bool) {
	host, port := node, ""
	v6 := strings.HasPrefix(node, "[")
	if v6 {
		end := strings.IndexByte(node, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		host, port = node[1:end], node[end+1:]
	} else if i := strings.IndexByte(node, ':'); i >= 0 {
		host, port = node[:i], node[i:]
	}
	if port != "" && (port[0] != ':' || !nodePort(port[1:])) {
		return netip.Addr{}, false
	}
	// A zone is refused before the parse, which would keep a copy of it.
	if strings.IndexByte(host, '%') >= 0 {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	if err != nil || a.Is6() != v6 {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// nodePort reports whether p is a port of Forwarded: one to five digits,
// or "_" and letters, digits, ".", "_" and "-".
func nodePort(p string) bool {
	if p == "" {
		return false
	}
	if p[0] == '_' {
		if len(p) == 1 {
			return false
		}
		for i := 1; i < len(p); i++ {
			c := p[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
				return false
			}
		}
		return true
	}
	if len(p) > 5 {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
	}
	return true
}
