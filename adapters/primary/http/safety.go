package httpapi

import (
	"mime"
	"net"
	"net/http"
	"path"
	"slices"
	"strings"
)

// InlineTypes are the media types an object is served as for display in a
// browser; any other type is served as a download (Content-Disposition:
// attachment), so an object a caller stored as text/html or image/svg+xml
// never runs script in the API's origin. The list is short on purpose:
// plain text, JSON and raster images, which a browser renders without
// running anything.
var InlineTypes = []string{
	"text/plain",
	"application/json",
	"image/png",
	"image/jpeg",
	"image/gif",
	"image/webp",
}

// defaultObjectType is the type of an object stored without one. Setting it
// keeps net/http from guessing one from the first bytes, which could be
// text/html.
const defaultObjectType = "application/octet-stream"

// objectSafety sets what keeps a stored object from acting as a page of
// the API's origin: its type is taken as given (nosniff), it may not run
// script or load anything (a sandboxing Content-Security-Policy), and it is
// a download unless its type is one of InlineTypes.
func objectSafety(h http.Header, key, contentType string) {
	if contentType == "" {
		contentType = defaultObjectType
	}
	h.Set("Content-Type", contentType)
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	mediaType, _, err := mime.ParseMediaType(contentType)
	if err == nil && slices.Contains(InlineTypes, mediaType) {
		return
	}
	disposition := mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(key)})
	if disposition == "" {
		disposition = "attachment"
	}
	h.Set("Content-Disposition", disposition)
}

// nosniff makes browsers take every answer's Content-Type as given.
func nosniff(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		next.ServeHTTP(w, r)
	})
}

// hostCheck refuses a request whose Host header names neither this API nor
// one of the names it is known by. Without a token, it is what keeps a web
// page from calling the API through a name of its own that resolves to the
// API's address (DNS rebinding): the browser sends that name as the Host.
// An IP address as Host is always allowed, since such a request was
// addressed to the API itself; so are "localhost" and the listen host.
// A configured name with a port allows that port only.
func hostCheck(listen string, names []string, next http.Handler) http.Handler {
	allowed := map[string]bool{"localhost": true}
	if h, _, err := net.SplitHostPort(listen); err == nil && h != "" {
		allowed[strings.ToLower(h)] = true
	}
	withPort := map[string]bool{}
	for _, n := range names {
		n = strings.ToLower(n)
		if _, _, err := net.SplitHostPort(n); err == nil {
			withPort[n] = true
			continue
		}
		allowed[strings.Trim(n, "[]")] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := strings.ToLower(r.Host)
		name := host
		if h, _, err := net.SplitHostPort(host); err == nil {
			name = h
		}
		name = strings.TrimSuffix(strings.Trim(name, "[]"), ".")
		if allowed[name] || withPort[host] || net.ParseIP(name) != nil {
			next.ServeHTTP(w, r)
			return
		}
		writeError(w, http.StatusMisdirectedRequest, "host "+quoteHost(r.Host)+
			" is not a name of this API; add it to http.hosts, or set http.token")
	})
}

// quoteHost quotes a Host header for an error message, cut short.
func quoteHost(h string) string {
	if len(h) > 100 {
		h = h[:100]
	}
	return `"` + strings.ToValidUTF8(strings.ReplaceAll(h, `"`, `'`), "?") + `"`
}
