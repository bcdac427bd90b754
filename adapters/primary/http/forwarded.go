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
// name such as _hidden). A line is split whole, since a quoted string may
// hold a comma, but its elements are read from the right and only as far
// as the client: a malformed one left of it, which the client wrote, is
// not read. Empty elements are skipped, as HTTP has it of lists.
func (c clients) forwarded(lines []string) (netip.Addr, bool) {
	var client netip.Addr
	for i := len(lines) - 1; i >= 0; i-- {
		elements, ok := splitElements(lines[i])
		if !ok {
			return netip.Addr{}, false
		}
		for j := len(elements) - 1; j >= 0; j-- {
			if elements[j] == "" {
				continue
			}
			a, ok := forwardedFrom(elements[j])
			if !ok {
				return netip.Addr{}, false
			}
			client = a
			if !c.trusts(a) {
				return a, true
			}
		}
	}
	return client, client.IsValid()
}

// splitElements splits a line of Forwarded at the commas outside quoted
// strings, each element trimmed of the blanks around it, and is false
// when a quoted string does not end on the line.
func splitElements(line string) ([]string, bool) {
	var out []string
	start, quoted := 0, false
	for i := 0; i < len(line); i++ {
		switch b := line[i]; {
		case quoted && b == '\\':
			i++
		case b == '"':
			quoted = !quoted
		case !quoted && b == ',':
			out = append(out, strings.Trim(line[start:i], " \t"))
			start = i + 1
		}
	}
	if quoted {
		return nil, false
	}
	return append(out, strings.Trim(line[start:], " \t")), true
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
			var value string
			var ok bool
			if value, s, ok = forwardedValue(s); !ok {
				return netip.Addr{}, false
			}
			if strings.EqualFold(name, "for") {
				if found {
					return netip.Addr{}, false
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
// quoted string (unescaped), and returns it and the rest of s.
func forwardedValue(s string) (value, rest string, ok bool) {
	if s == "" || s[0] != '"' {
		n := tokenLen(s)
		if n == 0 {
			return "", "", false
		}
		return s[:n], s[n:], true
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			return b.String(), s[i+1:], true
		case c == '\\':
			i++
			if i == len(s) || !quotedText(s[i]) && s[i] != '"' && s[i] != '\\' {
				return "", "", false
			}
			b.WriteByte(s[i])
		case quotedText(c):
			b.WriteByte(c)
		default:
			return "", "", false
		}
	}
	return "", "", false
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
	a, err := netip.ParseAddr(host)
	if err != nil || a.Zone() != "" || a.Is6() != v6 {
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
