package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/abi-engine/engine/ports"
)

// ObjectInfo describes a stored object; PUT answers it.
type ObjectInfo struct {
	Key         string    `json:"key"`
	Size        int64     `json:"size"`
	ETag        string    `json:"etag"`
	ContentType string    `json:"content_type"`
	Modified    time.Time `json:"modified"`
}

// byteRange is a satisfiable range of an object: length bytes from offset.
type byteRange struct{ offset, length int64 }

// errUnsatisfiable is a Range that selects no byte of the object.
var errUnsatisfiable = errors.New("range not satisfiable")

// parseRange reads a Range header against the object's size. It handles
// one range ("bytes=a-b", "bytes=a-", "bytes=-n"); ok is false when the
// header is absent, malformed or asks for several ranges, which HTTP lets a
// server answer with the whole object.
func parseRange(h string, size int64) (r byteRange, ok bool, err error) {
	spec, found := strings.CutPrefix(h, "bytes=")
	if !found || strings.Contains(spec, ",") {
		return r, false, nil
	}
	first, last, found := strings.Cut(strings.TrimSpace(spec), "-")
	if !found {
		return r, false, nil
	}
	if first == "" {
		n, err := strconv.ParseInt(last, 10, 64)
		if err != nil || n < 0 {
			return r, false, nil
		}
		if n == 0 || size == 0 {
			return r, true, errUnsatisfiable
		}
		n = min(n, size)
		return byteRange{offset: size - n, length: n}, true, nil
	}
	start, err := strconv.ParseInt(first, 10, 64)
	if err != nil || start < 0 {
		return r, false, nil
	}
	end := size - 1
	if last != "" {
		if end, err = strconv.ParseInt(last, 10, 64); err != nil || end < start {
			return r, false, nil
		}
		end = min(end, size-1)
	}
	if start >= size {
		return r, true, errUnsatisfiable
	}
	return byteRange{offset: start, length: end - start + 1}, true, nil
}

func etag(e string) string { return strconv.Quote(e) }

func objectHeaders(w http.ResponseWriter, key string, info ports.ObjectInfo) {
	h := w.Header()
	h.Set("Accept-Ranges", "bytes")
	h.Set("ETag", etag(info.ETag))
	objectSafety(h, key, info.ContentType)
	if !info.Modified.IsZero() {
		h.Set("Last-Modified", info.Modified.UTC().Format(http.TimeFormat))
	}
}

// objGet streams the object, or the range asked for, from the store to
// the client: neither side holds it whole. HEAD answers the headers alone.
// A range is resolved against a Stat, and the read is checked to be of the
// same version, so a Content-Range never mixes two versions of an object.
// If-Match pins the GET to a version (409 when the object is another), and
// If-Range keeps a Range to the version the client began with: once the
// object has changed, the whole of it is sent, 200, so a resumed download
// never appends the rest of one version to the start of another.
func (a *api) objGet(w http.ResponseWriter, r *http.Request) {
	key, store := r.PathValue("key"), a.services.ObjectStorage
	ctx := r.Context()
	rangeHeader := r.Header.Get("Range")
	ifMatch, pinned := precondition(r, "If-Match")
	if r.Method == http.MethodHead || rangeHeader != "" || r.Header.Get("If-None-Match") != "" || pinned {
		info, err := store.Stat(ctx, key)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		if pinned && !matchesETag(ifMatch, info.ETag) {
			a.fail(w, r, fmt.Errorf("object %q: If-Match %q: the object is now %s: %w", key, ifMatch, etag(info.ETag), ports.ErrConflict))
			return
		}
		if match := r.Header.Get("If-None-Match"); match == etag(info.ETag) || match == "*" {
			objectHeaders(w, key, info)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		if ifRange := r.Header.Get("If-Range"); ifRange != "" && ifRange != etag(info.ETag) {
			rangeHeader = "" // another version than the client's (or a date): the whole object
		}
		rng, ranged, err := parseRange(rangeHeader, info.Size)
		if err != nil {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", info.Size))
			writeError(w, http.StatusRequestedRangeNotSatisfiable, fmt.Sprintf("object %q of %d bytes: %s %q", key, info.Size, err, rangeHeader))
			return
		}
		if r.Method == http.MethodHead {
			objectHeaders(w, key, info)
			w.Header().Set("Content-Length", strconv.FormatInt(info.Size, 10))
			return
		}
		if ranged {
			a.sendObject(w, r, key, info.ETag, &rng)
			return
		}
		if pinned {
			a.sendObject(w, r, key, info.ETag, nil)
			return
		}
	}
	a.sendObject(w, r, key, "", nil)
}

// matchesETag reports whether an If-Match list names the object's ETag
// (quoted, as a GET answers it, or not) or is *. A weak tag never matches:
// If-Match compares strongly.
func matchesETag(list, tag string) bool {
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "*" || item == etag(tag) || item == tag {
			return true
		}
	}
	return false
}

// sendObject opens the object (or rng of it), expecting version when it
// is not "", and copies it to the client.
func (a *api) sendObject(w http.ResponseWriter, r *http.Request, key, version string, rng *byteRange) {
	opts := ports.GetObjectOptions{}
	if rng != nil {
		opts = ports.GetObjectOptions{Offset: rng.offset, Length: rng.length}
	}
	body, info, err := a.services.ObjectStorage.Get(r.Context(), key, opts)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	defer body.Close()
	if version != "" && info.ETag != version {
		a.fail(w, r, fmt.Errorf("object %q changed while it was read; ask again: %w", key, ports.ErrConflict))
		return
	}
	objectHeaders(w, key, info)
	length, code := info.Size, http.StatusOK
	if rng != nil {
		length, code = rng.length, http.StatusPartialContent
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", rng.offset, rng.offset+rng.length-1, info.Size))
	}
	w.Header().Set("Content-Length", strconv.FormatInt(length, 10))
	w.WriteHeader(code)
	a.metrics.SessionOpened(ViaHTTP)
	defer a.metrics.SessionClosed(ViaHTTP)
	n, err := io.Copy(a.pacedResponse(w), body)
	a.metrics.Transferred(ViaHTTP, DirectionOut, n)
	if err != nil {
		// The status is sent; a short body against its Content-Length is
		// how the client learns of the failure.
		a.log.Warn("object download broke off", "key", key, "sent", n, "of", length, "err", err)
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// objPut streams the body into the store. If-None-Match: * stores only if
// the key is absent, If-Match: "<etag>" only over that version; a failed
// condition is 409.
func (a *api) objPut(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	if err := preconditions(r, true, true); err != nil {
		a.fail(w, r, err)
		return
	}
	ifMatch, err := objectIfMatch(precondition(r, "If-Match"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	_, ifNoneMatch := precondition(r, "If-None-Match") // preconditions let only * through
	opts := ports.PutObjectOptions{
		ContentType: r.Header.Get("Content-Type"),
		IfAbsent:    ifNoneMatch,
		IfMatch:     ifMatch,
	}
	body := &countingReader{r: a.pacedBody(w, r)}
	a.metrics.SessionOpened(ViaHTTP)
	info, err := a.services.ObjectStorage.Put(r.Context(), key, body, opts)
	a.metrics.SessionClosed(ViaHTTP)
	a.metrics.Transferred(ViaHTTP, DirectionIn, body.n)
	// The server's write deadline ran from the request's start; the
	// upload may have taken longer.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(a.stall))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	w.Header().Set("ETag", etag(info.ETag))
	writeJSON(w, http.StatusOK, ObjectInfo{Key: info.Key, Size: info.Size, ETag: info.ETag, ContentType: info.ContentType, Modified: info.Modified})
}

// objectIfMatch reads an object PUT's If-Match, h as precondition reads
// it: one ETag, quoted or not; "" when the header is absent. A header that
// names no ETag (empty, an empty tag, *, a weak tag, a list) is refused: an
// empty one would be read as no condition, so the PUT would overwrite
// whatever is stored, and the others would never match the store's one
// strong ETag.
func objectIfMatch(h string, given bool) (string, error) {
	if !given {
		return "", nil
	}
	tag := strings.TrimSpace(h)
	if len(tag) >= 2 && tag[0] == '"' && tag[len(tag)-1] == '"' {
		tag = tag[1 : len(tag)-1]
	}
	if tag == "" || tag == "*" || strings.ContainsAny(tag, `",`) {
		return "", fmt.Errorf("%w: If-Match %q: want one object ETag, such as the ETag a GET answers", ports.ErrInvalidArgument, h)
	}
	return tag, nil
}

func (a *api) objDelete(w http.ResponseWriter, r *http.Request) {
	if err := preconditions(r, false, false); err != nil {
		a.fail(w, r, err)
		return
	}
	if err := a.services.ObjectStorage.Delete(r.Context(), r.PathValue("key")); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
