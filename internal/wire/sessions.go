package wire

// Sessions are calls that take more than one message: transfers of objects
// and overflow replies. They are opened on a queue-grouped subject; every
// later message goes to its owner's subject, which only the engine
// instance that opened it subscribes to, and names the session in headers.
// Chunks travel as raw bytes in the body, so neither side encodes them.

// Session headers.
const (
	// SessionHeader names the session: "<owner>:<random hex>".
	SessionHeader = "Abi-Session"
	// SessionSecretHeader carries the secret the open returned: only the
	// caller that opened a session can use it.
	SessionSecretHeader = "Abi-Session-Secret"
	// SeqHeader numbers a chunk written or read: 0, 1, 2, ...
	SeqHeader = "Abi-Seq"
	// DoneHeader "1" on a chunk read says nothing follows it.
	DoneHeader = "Abi-Done"
)

// Operations on a session's owner subject.
const (
	SessionWrite  = "write"
	SessionCommit = "commit"
	SessionRead   = "read"
	SessionClose  = "close"
)

// SessionOpened answers an open. ChunkSize is the most data one message
// may carry; Object describes the object a download reads. Window is how
// many chunks the caller may send, or ask for, before the first of them is
// answered; an engine that leaves it out takes one at a time (before ADR
// 0015 engines named it for uploads only).
type SessionOpened struct {
	ID        string      `json:"id"`
	Secret    string      `json:"secret"`
	ChunkSize int         `json:"chunk_size"`
	Window    int         `json:"window,omitempty"`
	Object    *ObjectInfo `json:"object,omitempty"`
}

// MaxTransferWindow is the widest window an engine names: what a caller
// keeps out, and an engine holds, stays bounded.
const MaxTransferWindow = 16

// SessionRef names a session: its id and secret.
type SessionRef struct {
	ID     string
	Secret string
}

// Ref is the reference to the session o opened.
func (o SessionOpened) Ref() SessionRef { return SessionRef{ID: o.ID, Secret: o.Secret} }

// ChunkAck answers a write: the engine holds chunk Seq.
type ChunkAck struct {
	Seq int64 `json:"seq"`
}

// OwnerOf is the owner part of a session id, "" when it has none.
func OwnerOf(id string) string {
	for i := range len(id) {
		if id[i] == ':' {
			return id[:i]
		}
	}
	return ""
}
