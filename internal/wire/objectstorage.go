package wire

import (
	"time"

	"github.com/abi-engine/engine/ports"
)

// Operations of the object_storage service. Stat, delete and list are
// one-shot; objects move through transfers opened on transfer.open.
const (
	OSStat         = "stat"
	OSDelete       = "delete"
	OSList         = "list"
	OSTransferOpen = "transfer.open"
)

// Transfer modes.
const (
	TransferPut = "put"
	TransferGet = "get"
)

// OSKey names an object: stat, delete.
type OSKey struct {
	Key string `json:"key"`
}

// OSListPage asks for a page of objects.
type OSListPage struct {
	Prefix string `json:"prefix,omitempty"`
	// Limit 0, left out or negative is a page of ports.DefaultPage, as the
	// ports read it: Go facades of earlier releases send a port's negative
	// limit as it is, and an old facade must work with a new engine.
	Limit  int    `json:"limit,omitempty"`
	Cursor string `json:"cursor,omitempty"`
}

// ObjectInfo describes an object: stat's answer, a commit's answer, an
// entry of list.
type ObjectInfo struct {
	Key         string    `json:"key"`
	Size        int64     `json:"size"`
	ETag        string    `json:"etag"`
	ContentType string    `json:"content_type"`
	Modified    time.Time `json:"modified"`
}

// InfoOf and Info convert between the port's ObjectInfo and the wire's.
func InfoOf(i ports.ObjectInfo) ObjectInfo {
	return ObjectInfo{Key: i.Key, Size: i.Size, ETag: i.ETag, ContentType: i.ContentType, Modified: i.Modified}
}

// Info is the port's form of i.
func (i ObjectInfo) Info() ports.ObjectInfo {
	return ports.ObjectInfo{Key: i.Key, Size: i.Size, ETag: i.ETag, ContentType: i.ContentType, Modified: i.Modified}
}

// OSObjects answers list; Cursor is "" on the last page.
type OSObjects struct {
	Objects []ObjectInfo `json:"objects"`
	Cursor  string       `json:"cursor"`
}

// TransferOpen opens a transfer. Mode "put" takes ContentType, IfAbsent
// and IfMatch, neither of which may be null, nor IfMatch ""; mode "get" takes Offset and
// Length (0: to the end). A field of the other mode is refused.
type TransferOpen struct {
	Mode        string `json:"mode"`
	Key         string `json:"key"`
	ContentType string `json:"content_type,omitempty"`
	IfAbsent    bool   `json:"if_absent,omitempty" strictjson:"notnull"`
	IfMatch     string `json:"if_match,omitempty" strictjson:"notnull"`
	Offset      int64  `json:"offset,omitempty"`
	Length      int64  `json:"length,omitempty"`
}

// Span is how many bytes a get of an object of size bytes moves: from
// Offset to the end, or Length of them when it is set. The engine reads
// that much, and a downloader knows from it where the chunks end.
func (o TransferOpen) Span(size int64) int64 {
	left := max(size-o.Offset, 0)
	if o.Length > 0 {
		left = min(left, o.Length)
	}
	return left
}

// TransferCommit ends an upload of Chunks chunks (0 to Chunks-1); the
// engine answers with the stored object's ObjectInfo.
type TransferCommit struct {
	Chunks int64 `json:"chunks"`
}
