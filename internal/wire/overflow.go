package wire

// Overflow: a reply or a request larger than one NATS message travels as a
// session of chunks on abi.rpc.overflow.<owner>.<operation>.
const (
	// OverflowHeader "1" on a request says the caller can fetch a parked reply.
	OverflowHeader = "Abi-Overflow"
	// OverflowReplyHeader names the parked reply, OverflowSizeHeader its
	// size in bytes, OverflowSecretHeader the secret its reads present.
	OverflowReplyHeader  = "Abi-Overflow-Reply"
	OverflowSizeHeader   = "Abi-Overflow-Size"
	OverflowSecretHeader = "Abi-Overflow-Secret"
	// OverflowRequestHeader names an uploaded request body, whose secret
	// goes in OverflowSecretHeader.
	OverflowRequestHeader = "Abi-Overflow-Request"
)

// OverflowPrefix starts every overflow subject.
const OverflowPrefix = "abi.rpc.overflow"

// OverflowOpenSubject opens an upload, on a queue group.
const OverflowOpenSubject = OverflowPrefix + ".open"

// OverflowSubject is an overflow session's owner subject.
func OverflowSubject(owner, operation string) string {
	return OverflowPrefix + "." + owner + "." + operation
}

// OverflowUpload opens an upload of Size bytes; the engine answers with a
// SessionOpened.
type OverflowUpload struct {
	Size int64 `json:"size"`
}
